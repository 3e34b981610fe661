"""kiln cibuildwheel --print-config / --check-config: the [tool.cibuildwheel] table kiln generates for a project
passes kiln's check and cibuildwheel's own reading, opkiln's own table passes, and every requirement a table drops
gets its own line."""

from __future__ import annotations

import copy
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiln_tool import __version__
from kiln_tool.containers import cibw_config
from kiln_tool.containers.cibw_config import KILN_PASSED, ConfigError, check, generate, load_table, render
from kiln_tool.matrix_data import load as load_matrix
from kiln_tool.project import KilnProject, load_project

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
KILN = REPO / "scripts" / "kiln"

PYPROJECTS = {
    "kiln": """[build-system]
requires = ["scikit-build-core>=1.1.2", "torch-kiln"]
build-backend = "scikit_build_core.build"

[project]
name = "Ring.Ops"
dynamic = ["version", "dependencies"]

[tool.kiln]
version = "0.3.0"
""",
    "backend": """[build-system]
requires = ["setuptools>=70", "wheel"]
build-backend = "setuptools.build_meta"

[project]
name = "twinlibs"
version = "1.2.0"

[tool.kiln]
libraries = "load-library"
""",
}


def _project(root: Path, build: str, table: str = "") -> KilnProject:
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text(PYPROJECTS[build] + table)
    return load_project(root)


@pytest.fixture(scope="module")
def projects(tmp_path_factory: pytest.TempPathFactory) -> dict[str, KilnProject]:
    base = tmp_path_factory.mktemp("projects")
    return {build: _project(base / build, build) for build in PYPROJECTS}


def _generated(project: KilnProject) -> dict[str, Any]:
    return generate(project, load_matrix(project.matrix_file), __version__)


@pytest.mark.parametrize("build", sorted(PYPROJECTS))
def test_the_generated_table_holds_and_reads_back_as_generated(projects: dict[str, KilnProject], build: str) -> None:
    project = projects[build]
    assert project.build == build
    table = _generated(project)
    assert check(table, project, __version__) == []
    text = render(table, project, __version__)
    assert tomllib.loads(text)["tool"]["cibuildwheel"] == table
    assert table["before-build"][0] == f'python -m pip install "torch-kiln=={__version__}"'
    labelled = "kiln -C {project} label {wheel}" in table["repair-wheel-command"]
    assert labelled == (build == "backend")
    assert ("environment" in table) == (build == "kiln")  # CMake's compiler launchers: kiln's build only
    if build == "kiln":  # no C/C++/CUDA sources in the wheel (tool.kiln.ship-sources), as kiln wheels builds it
        assert table["environment"]["SKBUILD_WHEEL_EXCLUDE"].split(";")[:2] == ["*.c", "*.cc"]


def test_the_generated_table_keeps_the_projects_own_excludes_and_ships_sources_when_asked(tmp_path: Path) -> None:
    own = _project(tmp_path / "own", "kiln", '\n[tool.scikit-build]\nwheel.exclude = ["*.txt"]\n')
    assert _generated(own)["environment"]["SKBUILD_WHEEL_EXCLUDE"].startswith("*.txt;*.c;")
    text = PYPROJECTS["kiln"].replace("[tool.kiln]\n", "[tool.kiln]\nship-sources = true\n")
    assert text != PYPROJECTS["kiln"]
    (tmp_path / "ship").mkdir()
    (tmp_path / "ship" / "pyproject.toml").write_text(text)
    assert "SKBUILD_WHEEL_EXCLUDE" not in _generated(load_project(tmp_path / "ship"))["environment"]


def test_opkilns_own_table_holds_with_kiln_run_from_its_tree() -> None:
    project = load_project(REPO)
    table = load_table(REPO)
    assert "{project}/scripts/kiln -C {project} repair" in table["repair-wheel-command"]
    assert check(table, project, __version__) == []
    # the same table run by an installed kiln needs torch-kiln, at this kiln's version
    installed = copy.deepcopy(table)
    installed["repair-wheel-command"] = installed["repair-wheel-command"].replace("python {project}/scripts/kiln",
                                                                                  "kiln")
    assert check(installed, project, __version__) == [
        f'before-build does not install torch-kiln, but the table runs `kiln`: add "python -m pip install '
        f'torch-kiln=={__version__}" first']


# -- every requirement dropped gets its line (hypothesis) ------------------------------------------------------------

Table = dict[str, Any]


def _drop_pass(name: str) -> Callable[[Table], None]:
    def drop(table: Table) -> None:
        table["environment-pass"].remove(name)
    return drop


def _edit_before(old: str, new: str | None) -> Callable[[Table], None]:
    def edit(table: Table) -> None:
        index = next(i for i, step in enumerate(table["before-build"]) if old in step)
        if new is None:
            del table["before-build"][index]
        else:
            table["before-build"][index] = table["before-build"][index].replace(old, new)
    return edit


def _remove(key: str, item: str) -> Callable[[Table], None]:
    def remove(table: Table) -> None:
        table[key].remove(item)
    return remove


def _delete(key: str) -> Callable[[Table], None]:
    def delete(table: Table) -> None:
        del table[key]
    return delete


def _select_all_but_skip(item: str) -> Callable[[Table], None]:
    """The generated build selectors (cp310-*...) leave free-threaded CPythons out already: select every build."""
    def select(table: Table) -> None:
        table["skip"].remove(item)
        table["build"] = ["*"]
    return select


SETTINGS: dict[str, tuple[Callable[[Table], None], str]] = {
    "isolation": (_delete("build-frontend"), "build isolation is on"),
    "musllinux": (_remove("skip", "*-musllinux_*"), "skip does not skip musllinux builds"),
    "free-threaded": (_select_all_but_skip("cp3??t-*"), "skip does not skip free-threaded builds"),
    **{f"pass {name}": (_drop_pass(name), f"environment-pass lacks {name} ") for name in KILN_PASSED},
    "torch pin": (_edit_before('"torch==${KILN_TORCH_VERSION', '"torch>=${KILN_TORCH_VERSION'),
                  "before-build does not install torch==${KILN_TORCH_VERSION}"),
    "torch index": (_edit_before('--index-url "${KILN_TORCH_INDEX', '--index-url "https://pypi.org/simple'),
                    "from another index than"),
    "torch runtime": (_edit_before("kiln torch-runtime --install", None), "does not run kiln torch-runtime"),
    "torch-kiln": (_edit_before("torch-kiln==", None), "before-build does not install torch-kiln"),
    "torch-kiln version": (_edit_before(f"torch-kiln=={__version__}", "torch-kiln==0.0.1"),
                           "not this kiln's version"),
}
DEPENDS = {"torch index": "torch pin", "torch-kiln version": "torch-kiln"}
"""A line that is only said while another requirement holds (no index is judged without the torch install)."""
REPAIR = ("repair", "audit", "release", "label", "joined")


def _repair_command(build: str, dropped: set[str]) -> tuple[str | None, list[str]]:
    """The repair command with the `dropped` parts of it, and the problem fragments expected."""
    steps, expected = [], []
    labelled = "{dest_dir}/labelled"
    if build == "backend" and "label" not in dropped:
        steps.append(f"kiln label {{wheel}} -w {labelled}")
    if "repair" not in dropped:
        source = f"{labelled}/*.whl" if build == "backend" else "{wheel}"
        steps.append(f"kiln repair {source} -w {{dest_dir}}")
    else:
        expected.append("does not run kiln repair")
    if build == "backend" and "label" in dropped and "repair" not in dropped:
        expected.append("does not run kiln label before kiln repair")
    if "audit" not in dropped:
        steps.append(f"kiln audit {'' if 'release' in dropped else '--release '}{{dest_dir}}/*.whl")
        if "release" in dropped:
            expected.append("lacks --release")
    else:
        expected.append("does not run kiln audit --release")
    if not steps:
        return None, ["no repair-wheel-command"]
    if "joined" in dropped and len(steps) > 1:
        expected.append("joins steps with ';'")
    return (" ; " if "joined" in dropped else " && ").join(steps), expected


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(build=st.sampled_from(sorted(PYPROJECTS)),
       dropped=st.sets(st.sampled_from(sorted(SETTINGS))),
       repair=st.sets(st.sampled_from(REPAIR)))
def test_each_dropped_requirement_gets_its_own_line(projects: dict[str, KilnProject], build: str, dropped: set[str],
                                                     repair: set[str]) -> None:
    project = projects[build]
    table = _generated(project)
    for name in sorted(dropped):
        if DEPENDS.get(name) in dropped:
            continue  # nothing left to break
        SETTINGS[name][0](table)
    command, expected = _repair_command(build, repair)
    if command is None:
        del table["repair-wheel-command"]
    else:
        table["repair-wheel-command"] = command
    expected += [SETTINGS[name][1] for name in dropped if DEPENDS.get(name) not in dropped]
    problems = check(table, project, __version__)
    assert len(problems) == len(expected), (problems, expected)
    for fragment in expected:
        assert sum(fragment in line for line in problems) == 1, (fragment, problems)
    assert all("\n" not in line for line in problems)


# -- hand-broken tables ----------------------------------------------------------------------------------------------


def test_other_spellings_cibuildwheel_accepts_are_read(projects: dict[str, KilnProject]) -> None:
    project = projects["kiln"]
    table = _generated(project)
    table["build-frontend"] = "build; args: --no-isolation"
    table["environment-pass"] = " ".join(table["environment-pass"])
    table["skip"] = "*-musllinux_* cp3??t-*"
    table["before-build"] = " && ".join(table["before-build"])
    table["repair-wheel-command"] = ["kiln repair {wheel} -w {dest_dir}", "kiln audit --release {dest_dir}/*.whl"]
    assert check(table, project, __version__) == []
    table["build"] = ["cp311-manylinux_*"]  # selecting no musllinux build needs no skip for it
    table["skip"] = ["cp3??t-*"]
    assert check(table, project, __version__) == []
    table["build-frontend"] = {"name": "build", "args": []}
    assert check(table, project, __version__) == [
        "build isolation is on (build-frontend 'build'): the build would get the newest torch the resolver picks, not "
        "the job's; set build-frontend = { name = \"pip\", args = [\"--no-build-isolation\"] }"]


def test_the_linux_table_is_read_over_the_top_level_one(projects: dict[str, KilnProject]) -> None:
    project = projects["kiln"]
    table = _generated(project)
    table["linux"] = {"repair-wheel-command": "auditwheel repair -w {dest_dir} {wheel}"}
    assert check(table, project, __version__) == [
        "repair-wheel-command does not run kiln repair (use 'kiln -C {project} repair {wheel} -w {dest_dir} && "
        "kiln -C {project} audit --release {dest_dir}/*.whl')",
        "repair-wheel-command does not run kiln audit --release on the repaired wheel"]


@pytest.mark.parametrize(("command", "problem"), [
    ("kiln repair {wheel} -w /tmp/out && kiln audit --release {dest_dir}/*.whl",
     "kiln repair in repair-wheel-command does not write into {dest_dir}"),
    ("kiln repair /tmp/other.whl -w {dest_dir} && kiln audit --release {dest_dir}/*.whl",
     "kiln repair in repair-wheel-command does not repair {wheel}"),
    ("kiln audit --release {dest_dir}/*.whl && kiln repair {wheel} -w {dest_dir}",
     "repair-wheel-command runs kiln audit before kiln repair"),
    ("kiln repair {wheel} -w {dest_dir} && kiln audit --release /tmp/*.whl",
     "kiln audit in repair-wheel-command does not audit the repaired wheel ({dest_dir}/*.whl)"),
    ("kiln label {wheel} -w /tmp/l && kiln repair {wheel} -w {dest_dir} && kiln audit --release {dest_dir}/*.whl",
     "repair-wheel-command runs kiln label, which a kiln build refuses"),
    ("kiln repair {wheel} -w {dest_dir} || true; kiln audit --release {dest_dir}/*.whl",
     "repair-wheel-command joins steps with ';', '||', not only &&"),
])
def test_a_kiln_builds_repair_command(projects: dict[str, KilnProject], command: str, problem: str) -> None:
    table = _generated(projects["kiln"])
    table["repair-wheel-command"] = command
    problems = check(table, projects["kiln"], __version__)
    assert len(problems) == 1 and problems[0].startswith(problem), problems


@pytest.mark.parametrize(("command", "problem"), [
    ("kiln label {wheel} -w /tmp/l && kiln repair {wheel} -w {dest_dir} && kiln audit --release {dest_dir}/*.whl",
     "kiln repair in repair-wheel-command does not repair the wheel kiln label wrote"),
    ("kiln repair /tmp/l/*.whl -w {dest_dir} && kiln label {wheel} -w /tmp/l && kiln audit --release {dest_dir}/*.whl",
     "repair-wheel-command runs kiln label after kiln repair"),
    ("kiln label /tmp/x.whl -w /tmp/l && kiln repair /tmp/l/*.whl -w {dest_dir} && kiln audit --release "
     "{dest_dir}/*.whl", "kiln label in repair-wheel-command does not label {wheel}"),
    # kiln run from the project's tree, or with -C, is kiln all the same
    ("python {project}/scripts/kiln -C {project} label {wheel} -w /tmp/l && {project}/scripts/kiln repair "
     "/tmp/l/*.whl -w {dest_dir} && python -m kiln_tool audit --release {dest_dir}/*.whl", None),
])
def test_a_backend_builds_repair_command(projects: dict[str, KilnProject], command: str, problem: str | None) -> None:
    table = _generated(projects["backend"])
    table["repair-wheel-command"] = command
    problems = check(table, projects["backend"], __version__)
    if problem is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problems[0].startswith(problem), problems


def test_kiln_installed_after_its_first_use_and_the_runtime_before_torch(projects: dict[str, KilnProject]) -> None:
    project = projects["kiln"]
    table = _generated(project)
    kiln, torch, runtime, requirements = table["before-build"]
    table["before-build"] = [runtime, requirements, torch, kiln]
    assert check(table, project, __version__) == [
        "before-build runs kiln torch-runtime --install before it installs torch",
        "before-build runs kiln before it installs torch-kiln"]


@pytest.mark.parametrize(("table", "message"), [
    (["not", "a", "table"], "tool.cibuildwheel is not a table"),
    ({"linux": "x"}, "tool.cibuildwheel.linux is not a table"),
    ({"skip": 3}, "tool.cibuildwheel.skip = 3 is not a string or a list of strings"),
    ({"before-build": {"a": 1}}, "tool.cibuildwheel.before-build is not a command"),
    ({"build-frontend": 7}, "tool.cibuildwheel.build-frontend is not a string or a table"),
    ({"repair-wheel-command": "kiln repair '{wheel}"}, "is not a shell command kiln can read"),
])
def test_a_table_that_cannot_be_read_is_one_error(projects: dict[str, KilnProject], table: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check(table, projects["kiln"], __version__)


def test_no_table_is_one_line(projects: dict[str, KilnProject]) -> None:
    project = projects["backend"]
    assert load_table(project.root) is None
    (line,) = check(None, project, __version__)
    assert line.endswith("no [tool.cibuildwheel] table (kiln cibuildwheel --print-config writes one)")


def test_shell_steps_and_pip_installs_are_read_as_sh_reads_them() -> None:
    steps = cibw_config.split_steps('A=1 kiln -C "{project}" audit --release x;pip install "torch==1" -i "u v"\ny||z')
    assert [(s.words, s.joined_by) for s in steps] == [
        (("A=1", "kiln", "-C", "{project}", "audit", "--release", "x"), ""),
        (("pip", "install", "torch==1", "-i", "u v"), ";"), (("y",), "\n"), (("z",), "||")]
    run = cibw_config.kiln_run(steps[0], 0)
    assert run is not None and (run.source, run.command, run.args) == ("installed", "audit", ("--release", "x"))
    pip = cibw_config.pip_install(steps[1], 1)
    assert pip is not None and pip.requirements == ("torch==1",) and pip.options == {"-i": "u v"}
    assert cibw_config.kiln_run(steps[2], 2) is None and cibw_config.pip_install(steps[2], 2) is None


# -- through the CLI, and through cibuildwheel itself ----------------------------------------------------------------


def _kiln(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(KILN), *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("build", sorted(PYPROJECTS))
def test_print_config_output_passes_check_config(tmp_path: Path, build: str) -> None:
    root = tmp_path / build
    _project(root, build)
    missing = _kiln("-C", str(root), "cibuildwheel", "--check-config")
    assert missing.returncode == 2 and missing.stdout == "", missing
    assert missing.stderr.count("\n") == 1 and "no [tool.cibuildwheel] table" in missing.stderr
    printed = _kiln("-C", str(root), "cibuildwheel", "--print-config")
    assert printed.returncode == 0 and printed.stderr == "", printed
    (root / "pyproject.toml").write_text(PYPROJECTS[build] + "\n" + printed.stdout)
    checked = _kiln("-C", str(root), "cibuildwheel", "--check-config")
    assert checked.returncode == 0, checked.stderr
    assert "[tool.cibuildwheel] holds for kiln" in checked.stdout
    broken = printed.stdout.replace('"KILN_TORCH_INDEX",\n', "").replace("--no-build-isolation", "--verbose")
    (root / "pyproject.toml").write_text(PYPROJECTS[build] + "\n" + broken)
    failed = _kiln("-C", str(root), "cibuildwheel", "--check-config")
    assert failed.returncode == 2 and failed.stdout == ""
    lines = failed.stderr.splitlines()
    assert len(lines) == 2 and "build isolation is on" in lines[0] and "lacks KILN_TORCH_INDEX" in lines[1]


def test_kiln_cibuildwheel_without_a_project_is_one_line_and_exit_2(tmp_path: Path) -> None:
    result = _kiln("-C", str(tmp_path), "cibuildwheel", "--check-config")
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "no pyproject.toml" in result.stderr


def test_cibuildwheel_reads_the_generated_table_and_builds_only_what_torch_has(tmp_path: Path) -> None:
    pytest.importorskip("cibuildwheel")
    for build in sorted(PYPROJECTS):
        root = tmp_path / build
        project = _project(root, build)
        table = render(_generated(project), project, __version__)
        (root / "pyproject.toml").write_text(PYPROJECTS[build] + "\n" + table)
        proc = subprocess.run([sys.executable, "-m", "cibuildwheel", "--print-build-identifiers", "--platform",
                               "linux", "--archs", "x86_64,aarch64", str(root)], capture_output=True, text=True,
                              timeout=120, cwd=root)
        assert proc.returncode == 0, proc.stderr
        identifiers = proc.stdout.split()
        pythons = load_matrix(project.matrix_file).python
        assert sorted(identifiers) == sorted(f"cp{p.replace('.', '')}-manylinux_{arch}" for p in pythons
                                             for arch in ("x86_64", "aarch64"))


def test_install_build_requirements_gives_pip_kilns_toolchain_or_the_backends(
        projects: dict[str, KilnProject], tmp_path: Path) -> None:
    """What before-build's `kiln cibuildwheel --install-build-requirements` hands the build Python's pip."""
    from kiln_tool.resources import requirements_path

    python = tmp_path / "python"
    argv = tmp_path / "argv"
    python.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {argv}\n')
    python.chmod(0o755)
    lock = str(requirements_path("build.lock"))
    assert cibw_config.install_build_requirements(projects["kiln"], python) == ["--require-hashes", "-r", lock]
    assert argv.read_text().splitlines() == ["-m", "pip", "install", "--require-hashes", "-r", lock]
    assert Path(lock).is_file()
    backend = _project(tmp_path / "withkiln", "backend").root
    text = (backend / "pyproject.toml").read_text().replace('"wheel"]', '"wheel", "torch>=2", "torch-kiln"]')
    (backend / "pyproject.toml").write_text(text)
    assert cibw_config.install_build_requirements(load_project(backend), python) == ["setuptools>=70", "wheel"]
    assert argv.read_text().splitlines() == ["-m", "pip", "install", "setuptools>=70", "wheel"]
    argv.unlink()
    nothing = _project(tmp_path / "bare", "backend").root
    (nothing / "pyproject.toml").write_text(PYPROJECTS["backend"].replace('["setuptools>=70", "wheel"]', "[]"))
    assert cibw_config.install_build_requirements(load_project(nothing), python) == [] and not argv.exists()


def test_a_project_without_a_table_is_built_with_the_generated_one(tmp_path: Path) -> None:
    """One [tool.kiln] table is all a project needs: kiln cibuildwheel hands cibuildwheel the generated table
    (--config-file), which cibuildwheel reads as the project's own; a table that fails kiln stops the build
    before anything runs, one line per problem, exit 2."""
    pytest.importorskip("cibuildwheel")
    from kiln_tool.containers.cibw import ConfigRefused, cibuildwheel_config_args

    for build in sorted(PYPROJECTS):
        project = _project(tmp_path / build, build)
        matrix = load_matrix(project.matrix_file)
        args = cibuildwheel_config_args(project, matrix, tmp_path / build)
        assert args[0] == "--config-file"
        config = Path(args[1])
        with config.open("rb") as fh:
            assert tomllib.load(fh)["tool"]["cibuildwheel"] == _generated(project)
        proc = subprocess.run([sys.executable, "-m", "cibuildwheel", "--print-build-identifiers", "--platform",
                               "linux", "--archs", "x86_64", *args, str(project.root)], capture_output=True,
                              text=True, timeout=120, cwd=project.root)
        assert proc.returncode == 0, proc.stderr
        assert sorted(proc.stdout.split()) == sorted(f"cp{p.replace('.', '')}-manylinux_x86_64" for p in matrix.python)
        # With a table that holds, the project's own is used as it is.
        (project.root / "pyproject.toml").write_text(PYPROJECTS[build] + "\n" + render(_generated(project), project,
                                                                                        __version__))
        assert cibuildwheel_config_args(load_project(project.root), matrix, tmp_path / build) == []
        # One that fails kiln: refused before cibuildwheel runs.
        (project.root / "pyproject.toml").write_text(PYPROJECTS[build] + '\n[tool.cibuildwheel]\nbuild = "cp311-*"\n')
        with pytest.raises(ConfigRefused) as refused:
            cibuildwheel_config_args(load_project(project.root), matrix, tmp_path / build)
        assert refused.value.exit_code == 2 and "before-build" in str(refused.value)
