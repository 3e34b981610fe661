"""kiln_tool.backend_build: a setuptools project's name without a [project] table, and what kiln gives its build
(a fresh setuptools build folder, a hardened link) through setuptools' own channels (issue 42, item 5)."""

from __future__ import annotations

import configparser
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln_tool.backend_build import VERSION_SCRIPTS, prepare, setup_name
from kiln_tool.project import ProjectError, canonical_name, load_project

TABLE = '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n\n[tool.kiln]\n'
NAMES = st.from_regex(r"[A-Za-z][A-Za-z0-9]{0,10}([-_.][A-Za-z0-9]{1,8}){0,2}", fullmatch=True)


def _project(root: Path, setup_py: str, setup_cfg: str | None = None, table: str = "") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text(TABLE + table)
    (root / "setup.py").write_text(setup_py)
    if setup_cfg is not None:
        (root / "setup.cfg").write_text(setup_cfg)
    return root


@settings(max_examples=40, deadline=None)
@given(name=NAMES)
def test_the_name_is_setup_pys_literal_or_setup_cfgs(tmp_path_factory: pytest.TempPathFactory, name: str) -> None:
    root = _project(tmp_path_factory.mktemp("p"), f"import setuptools\nsetuptools.setup(\n    name={name!r},\n"
                    "    ext_modules=[],\n)\n")
    assert setup_name(root) == name
    project = load_project(root)
    assert project.name == canonical_name(name)
    assert project.build == "backend" and project.version is None
    cfg = _project(tmp_path_factory.mktemp("c"), "from setuptools import setup\nsetup()\n",
                   f"[metadata]\nname = {name}\n")
    assert setup_name(cfg) == name


def test_a_name_that_is_not_written_down_is_one_clear_error(tmp_path: Path) -> None:
    root = _project(tmp_path / "p", "from setuptools import setup\nNAME = 'x' + 'y'\nsetup(name=NAME)\n")
    assert setup_name(root) is None
    with pytest.raises(ProjectError) as caught:
        load_project(root)
    (line,) = caught.value.problems
    assert "no [project] table" in line and 'setup(name="...")' in line


@pytest.mark.parametrize("kind", sorted(VERSION_SCRIPTS))
def test_the_build_gets_a_fresh_folder_and_a_hardened_link(tmp_path: Path, kind: str) -> None:
    root = _project(tmp_path / "p", "from setuptools import setup\nsetup(name='p')\n", table=f'libraries = "{kind}"\n')
    project = load_project(root)
    stale = tmp_path / "build" / "backend" / "build" / "lib" / "p" / "_ext.so"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"an old link")
    made = prepare(project, tmp_path / "build", {"CPPFLAGS": "-DUSER", "LDFLAGS": "-Wl,-z,now"})
    assert not stale.exists(), "setuptools never finds an old library to keep"
    config = configparser.ConfigParser()
    config.read(made.env["DIST_EXTRA_CONFIG"])
    assert config["build"]["build_base"] == str(made.folder / "build") and config["build_ext"]["force"] == "1"
    ldflags = made.env["LDFLAGS"].split()
    assert ldflags[0] == "-Wl,-z,now" and "-Wl,--exclude-libs,ALL" in ldflags
    (script,) = [f.split("=", 1)[1] for f in ldflags if f.startswith("-Wl,--version-script=")]
    assert Path(script).read_text() == VERSION_SCRIPTS[kind]
    assert made.env["CPPFLAGS"].startswith("-DUSER ")


def test_a_project_with_its_own_version_script_keeps_it(tmp_path: Path) -> None:
    """ld refuses two anonymous version scripts; the project's own wins."""
    root = _project(tmp_path / "p", "from setuptools import setup\nsetup(name='p', ext_modules=[Extension('p._x', "
                    "['x.cpp'], extra_link_args=['-Wl,--version-script=p.map'])])\n")
    made = prepare(load_project(root), tmp_path / "build", {})
    assert made.own_version_script and "--version-script" not in made.env["LDFLAGS"]
    assert "-Wl,--exclude-libs,ALL" in made.env["LDFLAGS"]
