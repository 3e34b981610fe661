"""kiln_tool.develop.develop_files_aside: a backend build (kiln wheels) never sees what `kiln develop` wrote into
the source package (issue 42, item 8: a find_packages() project carried <package>/_kiln/ into the backend's wheel,
which relabel refuses), and the editable install keeps them however the build ends. The real develop-then-wheels
run is tests/adopters/test_develop.py."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln_tool.develop import ASIDE, develop_files_aside
from kiln_tool.project import KilnProject, load_project

PYPROJECT = ('[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n\n'
             '[tool.kiln]\nlibraries = "python-module"\n')
FILES = st.dictionaries(st.from_regex(r"[a-z_]{1,8}\.py", fullmatch=True), st.binary(max_size=64), min_size=1,
                        max_size=4)


def _project(root: Path) -> KilnProject:
    root.mkdir(parents=True)
    (root / "pyproject.toml").write_text(PYPROJECT)
    (root / "setup.py").write_text('from setuptools import setup\nsetup(name="demo", packages=["demo"])\n')
    (root / "demo").mkdir()
    (root / "demo" / "__init__.py").write_text("")
    return load_project(root)


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@settings(max_examples=25, deadline=None)
@given(guard=FILES, info=st.binary(min_size=1, max_size=64), fail=st.booleans())
def test_the_develop_files_are_out_of_sight_during_the_build_and_back_after_it(
        tmp_path_factory: pytest.TempPathFactory, guard: dict[str, bytes], info: bytes, fail: bool) -> None:
    project = _project(tmp_path_factory.mktemp("p") / "demo-src")
    package = project.root / "demo"
    (package / "_kiln").mkdir()
    for name, data in guard.items():
        (package / "_kiln" / name).write_bytes(data)
    (package / "_build_info.json").write_bytes(info)
    before = _tree(package)
    build = project.root / "build" / "torch2.13-cpu"
    outcome = pytest.raises(RuntimeError) if fail else contextlib.nullcontext()
    with outcome, develop_files_aside(project, build) as moved:
        assert moved == ["_kiln", "_build_info.json"]
        assert _tree(package) == {"__init__.py": b""}, "setuptools sees the package as committed"
        if fail:
            raise RuntimeError("the build failed")
    assert _tree(package) == before
    assert not (build / ASIDE).exists()


def test_a_killed_builds_files_go_back_first_and_a_rewritten_file_is_kept(tmp_path: Path) -> None:
    project = _project(tmp_path / "demo-src")
    package = project.root / "demo"
    build = project.root / "build" / "b"
    (build / ASIDE / "_kiln").mkdir(parents=True)
    (build / ASIDE / "_kiln" / "guard.py").write_text("left aside by a killed build\n")
    (build / ASIDE / "_build_info.json").write_text("stale\n")
    (package / "_build_info.json").write_text("written by a kiln develop since\n")
    with develop_files_aside(project, build) as moved:
        assert sorted(moved) == ["_build_info.json", "_kiln"]
        assert not (package / "_kiln").exists()
    assert (package / "_kiln" / "guard.py").read_text() == "left aside by a killed build\n"
    assert (package / "_build_info.json").read_text() == "written by a kiln develop since\n"
    assert not (build / ASIDE).exists()


def test_a_tree_without_develop_files_is_untouched(tmp_path: Path) -> None:
    project = _project(tmp_path / "demo-src")
    with develop_files_aside(project, project.root / "build" / "b") as moved:
        assert moved == []
    assert _tree(project.root / "demo") == {"__init__.py": b""}
    assert not (project.root / "build" / "b" / ASIDE).exists()
