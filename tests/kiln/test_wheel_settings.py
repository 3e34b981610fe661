"""kiln_tool.wheel_settings (issue 42, item 8): a kiln build's wheel.exclude is the project's own plus the C/C++/CUDA
sources unless the table ships them, as kiln wheels passes it and as kiln's metadata provider adds it inside any
scikit-build-core build. The real build (a plain `pip wheel .` of ringops) is tests/adopters/test_no_sources.py."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln_tool.wheel_settings import SOURCE_PATTERNS, exclude_sources_in_build

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
def test_the_builds_own_patterns_come_first_and_every_source_pattern_is_added_once(own: list[str]) -> None:
    from scikit_build_core.settings.skbuild_model import ScikitBuildSettings

    settings = ScikitBuildSettings()
    settings.wheel.exclude = list(own)
    assert exclude_sources_in_build(False) is True
    got = settings.wheel.exclude
    assert got[:len(own)] == own
    assert set(got) == set(own) | set(SOURCE_PATTERNS) and len(got) == len(set(got))
    settings.wheel.exclude = list(own)
    assert exclude_sources_in_build(True) is False and settings.wheel.exclude == own, "ship-sources: untouched"


PROVIDER = """
from kiln_tool.wheel_settings import exclude_sources_in_build

def dynamic_metadata(settings, project):
    found = exclude_sources_in_build(settings.get("ship", False))
    return {"version": "1.0" if found else "0.0"}
"""


@pytest.mark.parametrize("ship", [False, True])
def test_the_metadata_provider_extends_the_exclude_list_of_the_scikit_build_core_build_that_runs_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ship: bool) -> None:
    """scikit-build-core's own SettingsReader and get_standard_metadata, as every build path runs them, with a
    provider that calls what kiln's metadata provider calls: the build's settings object gains the patterns."""
    from scikit_build_core.build.metadata import get_standard_metadata
    from scikit_build_core.settings.skbuild_read_settings import SettingsReader

    (tmp_path / "probe_provider.py").write_text(PROVIDER)
    text = (SKBUILD + '[project]\nname = "p"\ndynamic = ["version"]\n\n'
            '[[tool.dynamic-metadata]]\nprovider = { path = ".", module = "probe_provider" }\n'
            f'ship = {str(ship).lower()}\n\n'
            + KILN + '[tool.scikit-build]\nwheel.exclude = ["*.txt"]\n')
    (tmp_path / "pyproject.toml").write_text(text)
    monkeypatch.chdir(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKBUILD_")}
    settings_ = SettingsReader(_doc(text), {}, state="wheel", env=env).settings
    assert settings_.wheel.exclude == ["*.txt"]
    metadata = get_standard_metadata(_doc(text), settings_, build_state="wheel")
    if ship:
        assert str(metadata.version) == "0.0" and settings_.wheel.exclude == ["*.txt"]
    else:
        assert str(metadata.version) == "1.0" and settings_.wheel.exclude == ["*.txt", *SOURCE_PATTERNS]


def test_outside_a_scikit_build_core_build_nothing_is_touched() -> None:
    settings = {"wheel": {"exclude": ["*.txt"]}}  # a local of that name, but not scikit-build-core's settings
    assert exclude_sources_in_build(False) is False
    assert settings == {"wheel": {"exclude": ["*.txt"]}}
