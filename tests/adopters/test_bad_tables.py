"""Generated bad `[tool.kiln]` tables: `kiln -C <project> wheels` (the installed tool) answers each with exactly
one line on stderr naming the bad key, exit 2, and writes nothing into the project.

Each table is one of the fixture projects' own tables with exactly one thing wrong: an unknown key, a value of
the wrong type, a value outside an enum, a package or namespace that is no identifier, an abi list with an
unknown mode (or empty, repeated, too long), a version with a local label, a URL that is not http(s), a path
that leaves the project or is not there.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adopters.adopting import PROJECTS, KilnTool, own_table

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

pytestmark = pytest.mark.slow

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
VERSION = re.compile(r"[0-9]+(\.[0-9]+){0,4}((a|b|rc)[0-9]+)?(\.post[0-9]+)?(\.dev[0-9]+)?")
URL = re.compile(r"https?://[^\s\"'<>\\]{1,300}")
RELATIVE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./-]{0,199}")
KNOWN = ("package", "namespace", "build", "libraries", "abi", "version", "version-file", "index-url", "matrix",
         "schema-sources", "install-samples", "ship-sources")

# TOML basic strings: any character but surrogates and control characters (json.dumps escapes " and \).
_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=70)
_not_a_string = st.one_of(
    st.integers(-10**6, 10**6), st.booleans(), st.floats(allow_nan=False, allow_infinity=False),
    st.lists(st.sampled_from(["torch", "x", "ringops"]), max_size=3))


def _bad_string(valid: re.Pattern[str], max_length: int | None = None) -> st.SearchStrategy[str]:
    bad = _text.filter(lambda s: not valid.fullmatch(s))
    if max_length is None:
        return bad
    too_long = st.integers(max_length + 1, max_length + 30).map(lambda n: "1" * n)
    return st.one_of(bad, too_long)


def _bad_enum(allowed: tuple[str, ...]) -> st.SearchStrategy[Any]:
    near = st.sampled_from([a.upper() for a in allowed] + [a + " " for a in allowed] + ["", "cmake", "setuptools"])
    return st.one_of(near, _text.filter(lambda s: s not in allowed), _not_a_string)


_abi_mode = st.sampled_from(["torch", "stable"])
_bad_abi = st.one_of(
    st.lists(st.one_of(_abi_mode, _text), min_size=1, max_size=2).filter(
        lambda modes: any(m not in ("torch", "stable") for m in modes) and len(set(modes)) == len(modes)),
    st.just([]),
    _abi_mode.map(lambda m: [m, m]),
    st.just(["torch", "stable", "torch"]),
    _abi_mode,  # a string, not a list
    st.integers(0, 3))
_outside = st.sampled_from(["../matrix.json", "a/../../matrix.json", "/etc/hostname", "./x.json", "~/m.json"])
_missing = st.from_regex(r"[a-z]{1,12}/[a-z]{1,12}\.json", fullmatch=True)

BAD_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "package": st.one_of(_bad_string(IDENTIFIER), _not_a_string),
    "namespace": st.one_of(_bad_string(IDENTIFIER), _not_a_string),
    "build": _bad_enum(("kiln", "backend")),
    "libraries": _bad_enum(("python-module", "load-library")),
    "abi": _bad_abi,
    "version": st.one_of(_bad_string(VERSION, 40), st.sampled_from(["0.3.0+local", "v0.3.0", "0.3"]).map(
        lambda v: v if not VERSION.fullmatch(v) else v + "+x"), _not_a_string),
    "version-file": st.one_of(_bad_string(RELATIVE), _outside, _missing, _not_a_string),
    "index-url": st.one_of(_bad_string(URL), st.sampled_from(["ftp://example.org/wheels", "file:///srv/wheels",
                                                               "https://example.org/a b"]), _not_a_string),
    "matrix": st.one_of(_bad_string(RELATIVE), _outside, _missing, _not_a_string),
    # Only where it is used must it exist (kiln_tool.op_smoke): a missing file is no table error.
    "install-samples": st.one_of(_bad_string(RELATIVE), _outside, _not_a_string),
    "ship-sources": st.one_of(st.sampled_from(["true", "false", "yes", ""]), st.integers(0, 1), st.just([True]),
                              _text),
    "schema-sources": st.one_of(
        st.lists(st.sampled_from(["/abs/*.cpp", "../*.cpp", " csrc/*.cpp", "csrc/\"x\".cpp"]), min_size=1,
                 max_size=2, unique=True),
        st.lists(st.integers(0, 9), min_size=1, max_size=2),
        st.just(["csrc/*.cpp", "csrc/*.cpp"]),
        st.just("csrc/*.cpp"),
        st.integers(0, 9)),
}
_unknown_key = st.from_regex(r"[a-z][a-z0-9_-]{0,24}", fullmatch=True).filter(lambda k: k not in KNOWN)


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        assert math.isfinite(value)
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(type(value))


def with_table(pyproject_text: str, table: dict[str, Any]) -> str:
    """`pyproject_text` with its [tool.kiln] table (which runs to the end of the file) replaced by `table`."""
    head = pyproject_text[:pyproject_text.index("[tool.kiln]")]
    lines = [f"{key if re.fullmatch(r'[A-Za-z0-9_-]+', key) else json.dumps(key)} = {toml_value(value)}"
             for key, value in table.items()]
    return head + "[tool.kiln]\n" + "\n".join(lines) + "\n"


@st.composite
def one_bad_key(draw: st.DrawFn) -> tuple[str, dict[str, Any], str]:
    """(project, its table with one thing wrong, the key the error must name)."""
    project = draw(st.sampled_from(["ringops", "twinlibs"]))
    table = dict(own_table(project))
    key = draw(st.sampled_from([*KNOWN, "<unknown>"]))
    if key == "<unknown>":
        key = draw(_unknown_key)
        table[key] = draw(st.one_of(_text, st.integers()))
    else:
        if key == "version-file":
            table.pop("version", None)  # both set is a problem of its own
        table[key] = draw(BAD_VALUES[key])
    return project, table, key


@pytest.fixture(scope="module")
def copies(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A folder per project holding its pyproject.toml alone: a table kiln wrongly accepts then fails in seconds
    (nothing to build), not after a whole build."""
    root = tmp_path_factory.mktemp("bad-tables")
    for name in ("ringops", "twinlibs"):
        (root / name).mkdir()
        shutil.copy(PROJECTS / name / "pyproject.toml", root / name / "pyproject.toml")
    return {name: root / name for name in ("ringops", "twinlibs")}


def _files(root: Path) -> set[Path]:
    return {p.relative_to(root) for p in root.rglob("*")}


def check_refused(tool: KilnTool, root: Path, table: dict[str, Any], key: str) -> None:
    original = (PROJECTS / root.name / "pyproject.toml").read_text()
    text = with_table(original, table)
    assert tomllib.loads(text)["tool"]["kiln"] == table, text  # the generator wrote what it meant
    (root / "pyproject.toml").write_text(text, encoding="utf-8")
    before = _files(root)
    proc = tool.run("-C", root, "wheels", timeout=120)
    lines = proc.stderr.splitlines()
    shown = f"[tool.kiln] {table!r}\nexit {proc.returncode}\nstderr:\n{proc.stderr}stdout:\n{proc.stdout}"
    assert proc.returncode == 2, shown
    assert len(lines) == 1, shown
    assert f"tool.kiln.{key}" in lines[0], shown
    assert "Traceback" not in proc.stderr + proc.stdout, shown
    assert _files(root) == before, f"{shown}\nit wrote {sorted(_files(root) - before)}"


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=one_bad_key())
def test_a_bad_table_gets_one_line_naming_the_key_and_exit_2(kiln_tool: KilnTool, copies: dict[str, Path],
                                                             case: tuple[str, dict[str, Any], str]) -> None:
    project, table, key = case
    check_refused(kiln_tool, copies[project], table, key)


@pytest.mark.parametrize(("key", "value"), [
    ("package", "import"),  # an identifier Python cannot import
    ("package", "ring-ops"),
    ("namespace", "ring.ops"),
    ("abi", ["torch", "cxx11"]),
    ("build", "setuptools"),
    ("libraries", "shared"),
    ("version", "0.3.0+cpu"),
    ("matrix", "../matrix.json"),
    ("pakage", "ringops"),
    ("ship-sources", "yes"),
])
def test_each_kind_of_mistake(kiln_tool: KilnTool, copies: dict[str, Path], key: str, value: Any) -> None:
    table = {**own_table("ringops"), key: value}
    check_refused(kiln_tool, copies["ringops"], table, key)


def test_the_fixture_tables_themselves_pass_the_check() -> None:
    """The generated tables differ from a good one by exactly the key under test."""
    for project in ("ringops", "twinlibs"):
        table = own_table(project)
        assert set(table) <= set(KNOWN), table
        assert IDENTIFIER.fullmatch(table["package"]) and IDENTIFIER.fullmatch(table["namespace"])
