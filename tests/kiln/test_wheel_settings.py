"""kiln_tool.wheel_settings: the settings kiln gives every scikit-build-core build through the entry point torch-kiln
installs (issue 42, item 8): a kiln build's wheel.exclude is the project's own plus the C/C++/CUDA sources, unless
the table ships them; scikit-build-core's own SettingsReader applies it above pyproject.toml. The real build (a
plain `pip wheel .` of ringops) is tests/adopters/test_no_sources.py."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln_tool import resources
from kiln_tool.wheel_settings import SOURCE_PATTERNS, provider, wheel_exclude

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

SKBUILD = '[build-system]\nrequires = ["scikit-build-core"]\nbuild-backend = "scikit_build_core.build"\n\n'
KILN = '[tool.kiln]\npackage = "p"\nnamespace = "p"\nversion = "0.1.0"\n'
PATTERN = st.text(alphabet="abcXYZ*?./_-", min_size=1, max_size=12)


def _doc(text: str) -> dict[str, Any]:
    return tomllib.loads(text)


@settings(max_examples=60, deadline=None)
@given(own=st.lists(st.one_of(PATTERN, st.sampled_from(SOURCE_PATTERNS)), max_size=6, unique=True))
def test_the_projects_own_patterns_come_first_and_every_source_pattern_is_added_once(own: list[str]) -> None:
    doc = _doc(SKBUILD + KILN)
    doc["tool"]["scikit-build"] = {"wheel": {"exclude": own}}
    got = wheel_exclude(doc, env={})
    assert got is not None
    assert got[:len(own)] == own
    assert set(got) == set(own) | set(SOURCE_PATTERNS) and len(got) == len(set(got))


@pytest.mark.parametrize(("text", "why"), [
    (SKBUILD, "no [tool.kiln]: not kiln's project"),
    (SKBUILD + KILN + "ship-sources = true\n", "the table ships its sources"),
    (SKBUILD + KILN + 'build = "backend"\n', "the project's own backend builds it"),
    ('[build-system]\nbuild-backend = "setuptools.build_meta"\n\n' + KILN, "a setup.py project: build is backend"),
    (SKBUILD + KILN + '[tool.scikit-build]\nwheel.exclude = "*.txt"\n', "not a list: scikit-build-core says so"),
])
def test_kiln_says_nothing_where_it_does_not_build_or_the_table_ships_sources(text: str, why: str) -> None:
    assert wheel_exclude(_doc(text), env={}) is None, why


def test_an_sdist_is_left_alone() -> None:
    assert wheel_exclude(_doc(SKBUILD + KILN), state="sdist", env={}) is None
    assert wheel_exclude(_doc(SKBUILD + KILN), state="editable", env={}) == list(SOURCE_PATTERNS)


def test_the_projects_matching_overrides_are_applied_before_kiln_adds_its_patterns() -> None:
    text = (SKBUILD + KILN + '[tool.scikit-build]\nwheel.exclude = ["*.txt"]\n\n'
            '[[tool.scikit-build.overrides]]\nif.env.KILN_TEST_FLAVOUR = "docs"\nwheel.exclude = ["*.md"]\n')
    assert wheel_exclude(_doc(text), env={}) == ["*.txt", *SOURCE_PATTERNS]
    assert wheel_exclude(_doc(text), env={"KILN_TEST_FLAVOUR": "docs"}) == ["*.md", *SOURCE_PATTERNS]


def test_the_provider_reads_the_current_folders_pyproject_and_never_raises(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert provider("wheel", {}) == {}, "no pyproject.toml: another tool's build"
    (tmp_path / "pyproject.toml").write_text(SKBUILD + KILN + "[tool.scikit-build\n")
    assert provider("wheel", {}) == {}, "a broken pyproject is scikit-build-core's to report"
    (tmp_path / "pyproject.toml").write_bytes(b"\xff\xfe[tool.kiln]\n")
    assert provider("wheel", {}) == {}
    (tmp_path / "pyproject.toml").write_text(SKBUILD + '[project]\nname = "p"\nversion = "0.1"\n\n' + KILN
                                             + '[tool.scikit-build]\nwheel.exclude = ["*.txt"]\n')
    assert provider("wheel", {}) == {"wheel": {"exclude": ["*.txt", *SOURCE_PATTERNS]}}


def test_scikit_build_cores_settings_take_it_above_the_pyproject_and_below_config_settings(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The group and the call scikit-build-core makes: its SettingsReader with kiln's entry point registered."""
    from scikit_build_core.settings import _load_entrypoint_config as loader
    from scikit_build_core.settings.skbuild_read_settings import SettingsReader

    (group, points), = ((g, p) for g, p in resources.ENTRY_POINTS.items() if g == loader.GROUP_OVERRIDE)
    module, _, attr = points["kiln"].partition(":")

    class EntryPoint:
        name = "kiln"
        dist = None

        def load(self) -> object:
            return getattr(__import__(module, fromlist=[attr]), attr)

    monkeypatch.setattr(loader.metadata, "entry_points",
                        lambda *, group: [EntryPoint()] if group == loader.GROUP_OVERRIDE else [])
    monkeypatch.chdir(tmp_path)
    text = (SKBUILD + '[project]\nname = "p"\nversion = "0.1"\n\n' + KILN
            + '[tool.scikit-build]\nwheel.exclude = ["*.txt"]\n')
    (tmp_path / "pyproject.toml").write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKBUILD_")}
    read = SettingsReader(_doc(text), {}, state="wheel", env=env)
    assert read.settings.wheel.exclude == ["*.txt", *SOURCE_PATTERNS]
    given_per_build = SettingsReader(_doc(text), {"wheel.exclude": "*.md"}, state="wheel", env=env)
    assert given_per_build.settings.wheel.exclude == ["*.md"], "a per-build -C still wins"
    assert group == "scikit-build-core.config.override"
