"""Issue 43, class 2: a [tool.kiln] table is validated against its normal form (a pattern must match the whole
value: a trailing newline is refused), may not name a package that shadows the standard library, torch or other
well-known top-level names, nor an op namespace torch reserves; every path stays inside the project as a regular
file (a FIFO never hangs kiln, a symlink never leads out), and a huge table prints a bounded report. Tables are
generated with hypothesis; each case loads a real pyproject.toml from a temporary project."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiln_tool.build_info import schema_sources
from kiln_tool.project import ProjectError, load_project, reserved_names, schema, table_problems

BASE = {"version": "0.3.0", "build": "backend"}


def _toml_value(value: object) -> str:
    import json

    return json.dumps(value)  # a JSON string or list of strings is a TOML basic string or array


def _project(root: Path, table: dict[str, object], name: str = "ringops") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    lines = ["[project]", f"name = {_toml_value(name)}", "", "[tool.kiln]"]
    lines += [f"{_toml_value(key)} = {_toml_value(value)}" for key, value in table.items()]
    (root / "pyproject.toml").write_text("\n".join(lines) + "\n")
    return root


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["version", "package", "namespace", "index-url", "version-file", "matrix"]),
       st.sampled_from(["\n", "\r\n", "\n\n"]))
def test_a_trailing_newline_is_not_the_normal_form(key: str, newline: str) -> None:
    good = {"version": "0.3.0", "package": "ringops", "namespace": "ringops", "index-url": "https://w.example/r",
            "version-file": "VERSION", "matrix": "matrix.json"}[key]
    assert not [p for p in table_problems({key: good}) if key in p]
    problems = table_problems({key: good + newline})
    assert any(p.startswith(f"tool.kiln.{key}") for p in problems), problems


def test_an_op_name_with_a_newline_inside_is_refused() -> None:
    assert table_problems({"namespace": "ns\n"}) and table_problems({"schema-sources": ["src/*.cpp\n"]})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(sorted(reserved_names()[0] & set(sys.stdlib_module_names) | {"torch", "numpy", "triton"})))
def test_a_package_may_not_shadow_the_stdlib_or_torch(tmp_path: Path, name: str) -> None:
    if not name.isidentifier():
        return
    root = _project(tmp_path / f"p_{name}", {**BASE, "package": name, "namespace": "ringops"})
    with pytest.raises(ProjectError, match="would install over it"):
        load_project(root)


def test_the_default_package_from_the_project_name_is_checked_too(tmp_path: Path) -> None:
    with pytest.raises(ProjectError, match=r"tool.kiln.package \(default, from \[project\] name\) = 'torch'"):
        load_project(_project(tmp_path / "t", {**BASE, "namespace": "ringops"}, name="torch"))


@pytest.mark.parametrize("namespace", ["aten", "prim", "prims", "quantized", "_quantized", "c10d", "higher_order"])
def test_a_namespace_torch_reserves_is_refused(tmp_path: Path, namespace: str) -> None:
    with pytest.raises(ProjectError, match="an op namespace torch reserves"):
        load_project(_project(tmp_path / namespace, {**BASE, "namespace": namespace}))


def test_a_version_file_that_is_a_fifo_does_not_hang(tmp_path: Path) -> None:
    root = _project(tmp_path / "fifo", {"build": "backend", "version-file": "VERSION"})
    os.mkfifo(root / "VERSION")

    def release() -> None:  # give a blocked reader its end of file (kiln before issue 43 blocked for ever)
        with contextlib.suppress(OSError):
            os.close(os.open(root / "VERSION", os.O_WRONLY | os.O_NONBLOCK))

    timer = threading.Timer(10.0, release)
    timer.start()
    try:
        with pytest.raises(ProjectError, match="is not a regular file"):
            load_project(root)
    finally:
        timer.cancel()


@pytest.mark.parametrize("key", ["version-file", "matrix", "install-samples"])
def test_a_path_through_dotdot_or_a_symlink_stays_inside(tmp_path: Path, key: str) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("0.3.0\n")
    table = {"build": "backend"} if key == "version-file" else dict(BASE)
    root = _project(tmp_path / "a", {**table, key: "sub/../../outside.txt"})
    with pytest.raises(ProjectError, match="lies outside the project"):
        load_project(root)
    root = _project(tmp_path / "b", {**table, key: "link.txt"})
    (root / "link.txt").symlink_to(outside)
    with pytest.raises(ProjectError, match="lies outside the project"):
        load_project(root)


def test_schema_sources_never_leave_the_project(tmp_path: Path) -> None:
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "ops.cpp").write_text('m.def("x(Tensor a) -> Tensor");\n')
    assert any("lies outside" in p for p in table_problems({"schema-sources": ["src/../../secret/*.cpp"]}))
    root = _project(tmp_path / "proj", {**BASE, "schema-sources": ["src/*.cpp"]})
    (root / "src").mkdir()
    (root / "src" / "ok.cpp").write_text('m.def("ringops::y(Tensor a) -> Tensor");\n')
    project = load_project(root)
    assert schema_sources(project) == [root / "src" / "ok.cpp"]
    (root / "src" / "evil.cpp").symlink_to(tmp_path / "secret" / "ops.cpp")
    with pytest.raises(ValueError, match="leads outside the project"):
        schema_sources(project)
    (root / "src" / "evil.cpp").unlink()
    os.mkfifo(root / "src" / "pipe.cpp")  # not a regular file: never opened
    assert schema_sources(project) == [root / "src" / "ok.cpp"]


KNOWN = set(schema()["properties"])


@settings(max_examples=30, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=30).filter(lambda k: k not in KNOWN), st.integers(),
                       min_size=6, max_size=40))
def test_unknown_keys_give_a_bounded_report(table: dict[str, int]) -> None:
    problems = table_problems(table)
    named = [p for p in problems if ": unknown key (" in p]
    assert len(named) == 5 and len(problems) == 6, problems  # every key here is unknown: 5 named, 1 count
    assert problems[-1] == f"tool.kiln: {len(table) - 5} more unknown keys"
    assert all(p.isprintable() and len(p) < 1000 for p in problems), problems


def test_a_huge_table_prints_six_lines() -> None:
    table = {f"key\x1b[{i}": i for i in range(100_000)}
    problems = table_problems(table)
    assert len(problems) == 6 and problems[-1] == "tool.kiln: 99995 more unknown keys"
    assert all("\x1b" not in p for p in problems)
