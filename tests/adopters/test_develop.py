"""The maintainer's loop (issue 42, item 1) for a setup.py project: `kiln develop` in the maintainer's own venv
(torch, setuptools and the torch-kiln wheel, as the README has them install it) gives an editable install that
imports through kiln's guard (before: `No module named 'segops._kiln'`), and after a one-line kernel edit the
next `kiln develop` rebuilds it (ninja, incremental) and the change is what imports. Then `kiln wheels` of that
same tree, a find_packages() project: its wheel holds kiln's guard once, never the develop copy (before: relabel
refused the backend's wheel, which carried segops/_kiln/ and the develop build info), and the editable install
keeps its guard. The seconds of each step go to tests/_artifacts/adopters/timings.json; the venv is the session's
maintainer venv (tests/adopters/fixtures.py), shared with test_no_sources' plain pip wheel."""

from __future__ import annotations

import json
import os
import subprocess
import zipfile
from pathlib import Path

import pytest

from adopters.adopting import (
    COMMIT_DATE,
    Built,
    KilnTool,
    adopter_env,
    build_info,
    clone_project,
    kiln_wheels,
    run_python,
    timed,
)

pytestmark = pytest.mark.slow

CHECK = """
import json, torch, segops
src = torch.ones(3, 2)
out = segops.segment_sum(src, torch.tensor([0, 1, 1]), 2)
print(json.dumps({"file": segops.__file__, "out": out.tolist(),
                  "ops": segops._kiln.guard.build_info()["ops"], "torch": torch.__version__,
                  "built_for": segops._kiln.guard.build_info()["torch_version"]}))
"""


def _develop(venv: Path, root: Path, timing: str) -> subprocess.CompletedProcess[str]:
    with timed(timing):
        proc = subprocess.run([str(venv / "bin" / "kiln"), "-C", str(root), "develop"], cwd=root,
                              env=adopter_env(venv / "bin"), capture_output=True, text=True, timeout=1800,
                              check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def _find_packages(root: Path) -> None:
    """segops as many setup.py projects have it: find_packages() and package data globs that also match kiln
    develop's files (segops/_kiln/ is a package, _build_info.json a *.json); committed."""
    setup = root / "setup.py"
    text = setup.read_text()
    assert 'packages=["segops"],' in text
    setup.write_text(text.replace("from setuptools import setup", "from setuptools import find_packages, setup")
                     .replace('packages=["segops"],', 'packages=find_packages(include=["segops*"]),\n'
                              '    package_data={"segops": ["*.json"]},'))
    env = {**os.environ, "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@example.org", "GIT_COMMITTER_NAME": "a",
           "GIT_COMMITTER_EMAIL": "a@example.org", "GIT_AUTHOR_DATE": COMMIT_DATE, "GIT_COMMITTER_DATE": COMMIT_DATE}
    subprocess.run(["git", "-C", str(root), "commit", "--quiet", "--no-gpg-sign", "-am", "find_packages"],
                   check=True, env=env, capture_output=True)


def _members(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        return zf.namelist()


def test_an_editable_install_imports_through_the_guard_and_rebuilds_after_an_edit(
        kiln_tool: KilnTool, maintainer_python: Path, segops_cpu: Built, segops_clone: Path, tmp_path: Path) -> None:
    python = maintainer_python
    root = clone_project("segops", tmp_path / "src")
    _find_packages(root)
    elsewhere = tmp_path / "elsewhere"  # not beside the clone: `python -c` puts its folder first on sys.path
    elsewhere.mkdir()
    _develop(python.parent.parent, root, "segops develop: kiln develop (first)")
    first = run_python(python, CHECK, elsewhere)
    assert first.returncode == 0, first.stdout + first.stderr
    seen = json.loads(first.stdout.strip().splitlines()[-1])
    assert seen["file"] == str(root / "segops" / "__init__.py"), "the source tree is what imports"
    assert seen["out"] == [[1.0, 1.0], [2.0, 2.0]] and seen["ops"] == ["segops::segment_sum"]
    assert seen["built_for"] == seen["torch"], "the build info is the installed torch's"
    status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=all"],
                            capture_output=True, text=True, check=True).stdout
    assert "_kiln" not in status and "_build_info.json" not in status, "kiln's files stay out of commits"

    kernel = root / "csrc" / "segment.cpp"
    kernel.write_text(kernel.read_text().replace("+= ps[r * row + c];", "+= 2 * ps[r * row + c];"))
    rebuilt = _develop(python.parent.parent, root, "segops develop: kiln develop after a one-line kernel edit")
    assert "rebuilt segops's libraries in place" in rebuilt.stdout, rebuilt.stdout  # not pip's whole install
    again = run_python(python, CHECK, elsewhere)
    assert again.returncode == 0, again.stdout + again.stderr
    assert json.loads(again.stdout.strip().splitlines()[-1])["out"] == [[2.0, 2.0], [4.0, 4.0]]

    # kiln wheels of the same tree, kiln develop's files in it; the session's segops build venv (a link).
    right = segops_cpu.wheel("pt213cpu")
    (root / ".venvs").symlink_to(segops_clone / ".venvs", target_is_directory=True)
    with (root / ".git" / "info" / "exclude").open("a") as fh:
        fh.write("/.venvs\n")
    tool = KilnTool(venv=python.parent.parent, wheel=kiln_tool.wheel, workdir=elsewhere)  # the maintainer's kiln
    built = kiln_wheels(tool, root, timing="segops develop: kiln wheels of the developed tree")
    wheel = built.wheel("pt213cpu")
    members = _members(wheel)
    assert len(members) == len(set(members)), sorted(m for m in members if members.count(m) > 1)
    guard = sorted(m for m in members if m.startswith("segops/_kiln/"))
    want = sorted(m for m in _members(right) if m.startswith("segops/_kiln/"))
    assert guard == want and members.count("segops/_build_info.json") == 1, (guard, want)
    with zipfile.ZipFile(wheel) as zf, zipfile.ZipFile(right) as zr:
        assert all(zf.read(m) == zr.read(m) for m in guard), "kiln's guard, not the develop copy"
        assert build_info(wheel, "segops")["version"] == build_info(right, "segops")["version"] == "0.1.0+pt213cpu"
    after = run_python(python, CHECK, elsewhere)
    assert after.returncode == 0, "the editable install keeps its guard: " + after.stdout + after.stderr
    assert json.loads(after.stdout.strip().splitlines()[-1])["out"] == [[2.0, 2.0], [4.0, 4.0]]


RING_CHECK = """
import json, torch, ringops
print(json.dumps({"file": ringops.__file__, "out": torch.ops.ringops.ring_shift(torch.ones(1, 3), 1).tolist(),
                  "ops": ringops._kiln.guard.build_info()["ops"]}))
"""


def test_a_kiln_build_installs_editable_and_rebuilds_on_import_after_an_edit(maintainer_python: Path,
                                                                             tmp_path: Path) -> None:
    """kiln's build: scikit-build-core's rebuild on import, so the edit is what the next import runs."""
    python = maintainer_python
    root = clone_project("ringops", tmp_path / "src")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    _develop(python.parent.parent, root, "ringops develop: kiln develop")
    first = run_python(python, RING_CHECK, elsewhere)
    assert first.returncode == 0, first.stdout + first.stderr
    seen = json.loads(first.stdout.strip().splitlines()[-1])
    assert seen["out"] == [[1.0, 1.0, 1.0]] and seen["ops"] == ["ringops::ring_shift"], seen
    kernel = root / "csrc" / "ringops.cpp"
    text = kernel.read_text()
    assert text.count("= src[r * s.n + c];") == 1
    kernel.write_text(text.replace("= src[r * s.n + c];", "= 2 * src[r * s.n + c];"))
    with timed("ringops develop: the import after a one-line kernel edit (rebuild on import)"):
        again = run_python(python, RING_CHECK, elsewhere)
    assert again.returncode == 0, again.stdout + again.stderr
    assert json.loads(again.stdout.strip().splitlines()[-1])["out"] == [[2.0, 2.0, 2.0]]
