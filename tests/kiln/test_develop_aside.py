"""kiln_tool.develop.develop_files_aside: a backend build (kiln wheels) never sees what `kiln develop` wrote into
the source package (issue 42, item 8: a find_packages() project carried <package>/_kiln/ into the backend's wheel,
which relabel refuses), and the editable install keeps them however the build ends. The real develop-then-wheels
run is tests/adopters/test_develop.py. And when a setup.py project's next `kiln develop` only rebuilds its libraries
in place: never after a change to its build files, another python or torch, or without a full install here."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln_tool.develop import ASIDE, STAMP, _rebuild_in_place, _stamp, develop_files_aside
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


# ---------------------------------------------------------------------------- the in-place rebuild's condition

BUILD_FILES = ("pyproject.toml", "setup.py", "setup.cfg", "MANIFEST.in")


@settings(max_examples=30, deadline=None)
@given(changed=st.sampled_from([*BUILD_FILES, "csrc/segment.cpp", "demo/__init__.py"]), text=st.text(max_size=20))
def test_only_a_build_file_change_makes_the_next_develop_a_full_install(
        tmp_path_factory: pytest.TempPathFactory, changed: str, text: str) -> None:
    project = _project(tmp_path_factory.mktemp("s") / "demo-src")
    (project.root / "csrc").mkdir()
    (project.root / "csrc" / "segment.cpp").write_text("int f() { return 1; }\n")
    python = Path("/venv/bin/python")
    before = _stamp(project, python, "2.13.0+cpu")
    path = project.root / changed
    old = path.read_bytes() if path.is_file() else None
    path.write_text(text + "\n// edited\n")
    assert path.read_bytes() != old
    after = _stamp(project, python, "2.13.0+cpu")
    assert (after != before) == (changed in BUILD_FILES), changed
    assert _stamp(project, python, "2.14.1+cu130") != after, "another torch: a full install"
    assert _stamp(project, Path("/other/bin/python"), "2.13.0+cpu") != after, "another venv: a full install"


def test_without_a_recorded_full_install_or_a_setup_py_it_is_a_full_install(tmp_path: Path) -> None:
    project = _project(tmp_path / "demo-src")
    folder = tmp_path / "demo-src" / "build" / "editable" / "backend"
    folder.mkdir(parents=True)
    python = Path(sys.executable)
    stamp = _stamp(project, python, "2.13.0+cpu")
    assert not _rebuild_in_place(project, python, folder, stamp), "never installed from here"
    (folder / STAMP).write_text(stamp + "\n")
    assert not _rebuild_in_place(project, python, folder, stamp), "this python holds no editable install of demo"
    (project.root / "setup.py").unlink()
    assert not _rebuild_in_place(project, python, folder, _stamp(project, python, "2.13.0+cpu")), "no setup.py"
