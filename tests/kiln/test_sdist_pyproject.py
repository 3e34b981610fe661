"""`kiln sdist` of a setup.py project names kiln_tool.sdist_backend as the sdist's build backend and keeps the
project's own in [tool.kiln-sdist]: every other key of pyproject.toml is kept as it was (read back and compared),
whatever the table's layout; a layout it cannot edit so is refused, never written wrong. Pure text: ~1 s."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln_tool.commands.sdist import SdistError, with_kiln_backend

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

TWINLIBS = """[build-system]
requires = ["setuptools>=69", "torch"]
build-backend = "setuptools.build_meta"

[project]
name = "twinlibs"
version = "0.2.0"

[tool.kiln]
package = "twinlibs"
build = "backend"
"""


def test_the_backend_is_kiln_s_and_the_project_s_is_kept() -> None:
    doc = tomllib.loads(with_kiln_backend(TWINLIBS, "setuptools.build_meta"))
    assert doc["build-system"] == {"requires": ["setuptools>=69", "torch", "torch-kiln"],
                                   "build-backend": "kiln_tool.sdist_backend"}
    assert doc["tool"]["kiln-sdist"] == {"backend": "setuptools.build_meta"}
    assert doc["project"] == {"name": "twinlibs", "version": "0.2.0"}
    assert doc["tool"]["kiln"] == {"package": "twinlibs", "build": "backend"}


def test_no_build_system_table_is_setuptools_legacy() -> None:
    text = "[tool.kiln]\nlibraries = 'python-module'\n"
    doc = tomllib.loads(with_kiln_backend(text, "setuptools.build_meta:__legacy__"))
    assert doc["build-system"]["requires"] == ["setuptools", "torch-kiln"]
    assert doc["tool"] == {"kiln": {"libraries": "python-module"},
                           "kiln-sdist": {"backend": "setuptools.build_meta:__legacy__"}}


def test_a_layout_it_cannot_edit_is_refused() -> None:
    """build-system as a dotted key of the root table: dropping the [build-system] lines would keep it."""
    text = 'build-system.requires = ["setuptools"]\n[tool.kiln]\nbuild = "backend"\n'
    with pytest.raises(SdistError, match="without changing other keys"):
        with_kiln_backend(text, "setuptools.build_meta")


_KEYS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=8).filter(
    lambda k: not k.startswith("-") and k not in ("build-system", "tool"))
_VALUES = st.one_of(st.integers(-5, 5), st.text(alphabet="abc xyz._-", max_size=10), st.booleans(),
                    st.lists(st.text(alphabet="abc", max_size=3), max_size=3))


@settings(max_examples=60, deadline=None)
@given(tables=st.dictionaries(_KEYS, st.dictionaries(_KEYS, _VALUES, max_size=3), max_size=3),
       before=st.booleans())
def test_every_other_key_is_kept(tables: dict[str, dict[str, object]], before: bool) -> None:
    import json

    def table(name: str, values: dict[str, object]) -> str:
        return f"[{name}]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items()) + "\n"

    others = "".join(table(name, values) for name, values in tables.items())
    build = table("build-system", {"requires": ["setuptools"], "build-backend": "setuptools.build_meta"})
    text = build + others if before else others + build
    doc = tomllib.loads(with_kiln_backend(text, "setuptools.build_meta"))
    assert {k: v for k, v in doc.items() if k not in ("build-system", "tool")} == tables
