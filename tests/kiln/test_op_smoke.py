"""kiln_tool.op_smoke: the install samples a project names in [tool.kiln] install-samples are read as literals,
and anything else in their place is one clear error; the smoke script itself runs against real installs in
tests/wheels (opkiln), tests/adopters and the release rehearsal."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln_tool.op_smoke import EXERCISE, SamplesError, install_samples, project_samples
from kiln_tool.project import ProjectError, load_project

NAMES = st.from_regex(r"[a-z_][a-z0-9_]{0,12}", fullmatch=True)
EXPRESSIONS = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)


@settings(max_examples=40, deadline=None)
@given(first=st.dictionaries(NAMES, EXPRESSIONS, max_size=5), second=st.dictionaries(NAMES, EXPRESSIONS, max_size=5))
def test_samples_of_a_folder_are_every_files_dict(tmp_path_factory: pytest.TempPathFactory,
                                                  first: dict[str, str], second: dict[str, str]) -> None:
    folder = tmp_path_factory.mktemp("samples")
    (folder / "test_a.py").write_text(f"import torch\nINSTALL_SAMPLES = {first!r}\n")
    (folder / "test_b.py").write_text(f"INSTALL_SAMPLES = {second!r}\ndef test_x():\n    pass\n")
    (folder / "helper.py").write_text("INSTALL_SAMPLES = {'not_read': 'it is no test file'}\n")
    if set(first) & set(second):
        with pytest.raises(SamplesError, match="a second install sample"):
            install_samples(folder)
    else:
        assert install_samples(folder) == first | second
        assert install_samples(folder / "test_a.py") == first


@pytest.mark.parametrize(("text", "message"), [
    ("INSTALL_SAMPLES = {'a': f'{1}'}\n", "not a literal dict"),
    ("INSTALL_SAMPLES = ['a']\n", "not a literal dict"),
    ("INSTALL_SAMPLES = {'a': 1}\n", "not a literal dict"),
    ("INSTALL_SAMPLES = {\n", "cannot read its install samples"),
    ("\x00", "cannot read its install samples"),
])
def test_a_file_that_is_not_samples_is_one_error(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "test_x.py").write_text(text)
    with pytest.raises(SamplesError, match=message) as error:
        install_samples(tmp_path)
    assert error.value.exit_code == 2 and "\n" not in str(error.value).strip()


def test_the_samples_path_must_lie_inside_the_project_and_exist_where_it_is_used(tmp_path: Path) -> None:
    base = '[project]\nname = "ringops"\n[build-system]\nbuild-backend = "setuptools.build_meta"\n[tool.kiln]\n'
    for value, message in (("../elsewhere", "not a relative path inside the project"),
                           ("a/../../b", "lies outside the project")):
        (tmp_path / "pyproject.toml").write_text(base + f'install-samples = "{value}"\n')
        with pytest.raises(ProjectError, match=message):
            load_project(tmp_path)
    # A checkout without the tests (a release job's) reads the table; the smoke names the missing path.
    (tmp_path / "pyproject.toml").write_text(base + 'install-samples = "tests/none"\n')
    with pytest.raises(SamplesError, match="does not exist"):
        project_samples(load_project(tmp_path))
    (tmp_path / "tests").mkdir()
    (tmp_path / "pyproject.toml").write_text(base + 'install-samples = "tests"\n')
    assert load_project(tmp_path).install_samples == tmp_path / "tests"


def test_the_smoke_names_an_unregistered_op_and_an_op_without_a_sample(tmp_path: Path) -> None:
    """A package whose build manifest names an op nothing registered, then one whose ops have no sample: each
    run exits non-zero naming them (real torch, a package written here)."""
    torch = pytest.importorskip("torch")
    del torch
    package = tmp_path / "smokepkg"
    package.mkdir()
    (package / "__init__.py").write_text(
        "import torch\n"
        "lib = torch.library.Library('smokepkg', 'DEF')\n"
        "lib.define('twice(Tensor x) -> Tensor')\n"
        "lib.impl('twice', lambda x: x * 2, 'CompositeExplicitAutograd')\n")
    info = {"version": "1.0", "ops": ["smokepkg::twice"]}
    (package / "_build_info.json").write_text(json.dumps(info))

    def run(samples: object) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", EXERCISE, "smokepkg", json.dumps(samples)], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300, env={"PYTHONPATH": str(tmp_path),
                                                                               "PATH": "/usr/bin:/bin"})

    ok = run({"twice": "smokepkg.lib and torch.ops.smokepkg.twice(torch.ones(2))"})
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["results"] == {"twice": [2.0, 2.0]}
    assert run(None).returncode == 0
    unsampled = run({})
    assert unsampled.returncode == 1 and "no install sample for op(s) twice" in unsampled.stderr
    (package / "_build_info.json").write_text(json.dumps({**info, "ops": ["smokepkg::twice", "smokepkg::gone"]}))
    missing = run(None)
    assert missing.returncode == 1 and "unregistered: smokepkg::gone" in missing.stderr
