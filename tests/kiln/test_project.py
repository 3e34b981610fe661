"""[tool.kiln]: the table a project adopts kiln with (kiln_tool.project), and kiln -C DIR."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import fastjsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiln_tool.project import KilnProject, ProjectError, find_project, load_project, schema, table_problems

REPO = Path(__file__).resolve().parents[2]
KILN = [sys.executable, str(REPO / "scripts" / "kiln")]
SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string is a JSON string for what is generated here
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(value)


def write_project(root: Path, table: dict[str, Any], *, name: str = "ringops",
                  backend: str = "scikit_build_core.build") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    lines = ["[build-system]", 'requires = ["scikit-build-core"]', f'build-backend = "{backend}"', "",
             "[project]", f'name = "{name}"', 'dynamic = ["version", "dependencies"]', "", "[tool.kiln]"]
    lines += [f"{json.dumps(k)} = {_toml_value(v)}" for k, v in table.items()]
    (root / "pyproject.toml").write_text("\n".join(lines) + "\n")
    return root


def test_opkiln_is_configured_like_any_project() -> None:
    project = load_project(REPO)
    assert (project.name, project.package, project.namespace, project.build) == ("opkiln", "opkiln", "opkiln", "kiln")
    assert project.abi_modes == ("torch", "stable")
    assert project.version == (REPO / "VERSION").read_text().strip()
    assert project.index_url == "https://opkiln.github.io/wheels"


def test_defaults_of_a_minimal_table(tmp_path: Path) -> None:
    root = write_project(tmp_path / "p", {"version": "0.3.0"}, name="My.Ring-Ops")
    project = load_project(root)
    assert project == KilnProject(root=root.resolve(), name="my-ring-ops", package="my_ring_ops",
                                  namespace="my_ring_ops", build="kiln", libraries="python-module",
                                  abi_modes=("torch",), version="0.3.0", index_url=None,
                                  matrix_file=project.matrix_file, build_requires=("scikit-build-core",))
    assert project.wheel_name == "my_ring_ops"
    assert project.matrix_file.name == "matrix.json" and project.matrix_file.is_file()


def test_another_backend_defaults_to_a_backend_build(tmp_path: Path) -> None:
    root = write_project(tmp_path / "p", {"libraries": "load-library"}, backend="setuptools.build_meta")
    project = load_project(root)
    assert (project.build, project.libraries, project.version) == ("backend", "load-library", None)


@pytest.mark.parametrize(("table", "name"), [({"package": "import"}, "ringops"), ({"namespace": "def"}, "ringops"),
                                             ({"version": "1.0"}, "class"), ({"version": "1.0"}, "2fast")])
def test_a_package_or_namespace_that_cannot_be_written_is_refused(tmp_path: Path, table: dict[str, str],
                                                                 name: str) -> None:
    with pytest.raises(ProjectError) as info:
        load_project(write_project(tmp_path / "p", {"version": "1.0", **table}, name=name))
    assert len(info.value.problems) == 1
    assert info.value.problems[0].startswith(("tool.kiln.package", "tool.kiln.namespace"))


def test_a_kiln_build_needs_its_base_version(tmp_path: Path) -> None:
    with pytest.raises(ProjectError, match="needs the base version"):
        load_project(write_project(tmp_path / "p", {}))


def test_version_file_is_read_and_checked(tmp_path: Path) -> None:
    root = write_project(tmp_path / "p", {"version-file": "VERSION"})
    (root / "VERSION").write_text("1.2.3\n")
    assert load_project(root).version == "1.2.3"
    (root / "VERSION").write_text("1.2.3+local\n")
    with pytest.raises(ProjectError, match="version-file"):
        load_project(root)
    root = write_project(tmp_path / "q", {"version-file": "../VERSION"})
    with pytest.raises(ProjectError):
        load_project(root)


def test_no_table_is_no_project(tmp_path: Path) -> None:
    assert find_project(tmp_path) is None
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    assert find_project(tmp_path) is None
    with pytest.raises(ProjectError, match=r"no \[tool.kiln\] table"):
        load_project(tmp_path)


def test_broken_toml_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.kiln\n")
    with pytest.raises(ProjectError) as info:
        load_project(tmp_path)
    assert len(info.value.problems) == 1 and "not valid TOML" in info.value.problems[0]


# -- the schema, and one line per bad key ---------------------------------------------------------------------

def test_the_schema_is_a_json_schema_and_documents_every_key() -> None:
    spec = schema()
    fastjsonschema.compile(spec)
    assert all(rule.get("description") for rule in spec["properties"].values())


GOOD: dict[str, st.SearchStrategy[Any]] = {
    "package": st.from_regex(r"[a-z_][a-z0-9_]{0,20}", fullmatch=True),
    "namespace": st.from_regex(r"[a-z_][a-z0-9_]{0,20}", fullmatch=True),
    "build": st.sampled_from(["kiln", "backend"]),
    "libraries": st.sampled_from(["python-module", "load-library"]),
    "abi": st.sampled_from([["torch"], ["stable"], ["torch", "stable"], ["stable", "torch"]]),
    "version": st.from_regex(r"[0-9]{1,3}(\.[0-9]{1,3}){0,3}", fullmatch=True),
    "index-url": st.from_regex(r"https://[a-z]{1,10}\.example/[a-z/]{0,20}", fullmatch=True),
}
BAD: dict[str, st.SearchStrategy[Any]] = {
    "package": st.one_of(st.integers(), st.from_regex(r"[0-9-][a-z]{0,5}", fullmatch=True), st.just("a" * 65)),
    "namespace": st.one_of(st.lists(st.text(max_size=3), max_size=2), st.from_regex(r"[a-z]+[ .:-][a-z]+",
                                                                                     fullmatch=True)),
    "build": st.text(max_size=8).filter(lambda s: s not in ("kiln", "backend")),
    "libraries": st.one_of(st.booleans(), st.sampled_from(["python_module", "shared", ""])),
    "abi": st.one_of(st.just([]), st.just(["torch", "torch"]), st.lists(st.sampled_from(["cuda", "abi3", ""]),
                                                                         min_size=1, max_size=2), st.just("torch")),
    "version": st.sampled_from(["1.0+local", "v1", "1..0", "", "1.0.0.0.0.0"]),
    "index-url": st.sampled_from(["ftp://x.example", "https://a b", "not a url", 'https://x/"><script>']),
    "matrix": st.sampled_from(["/etc/passwd", "", "a b.json"]),
}


@SETTINGS
@given(good=st.fixed_dictionaries({}, optional=GOOD), bad=st.dictionaries(
    st.sampled_from(sorted(BAD)), st.none(), min_size=1, max_size=4).flatmap(
        lambda keys: st.fixed_dictionaries({k: BAD[k] for k in keys})),
    unknown=st.lists(st.from_regex(r"[a-z][a-z-]{0,12}", fullmatch=True).filter(lambda k: k not in schema()[
        "properties"]), max_size=2, unique=True))
def test_each_bad_key_gets_one_line_and_agrees_with_the_json_schema(good: dict[str, Any], bad: dict[str, Any],
                                                                   unknown: list[str]) -> None:
    table = {**good, **bad, **dict.fromkeys(unknown, 1)}
    problems = table_problems(table)
    named = {line.split(" ", 1)[0].split("[", 1)[0].removesuffix(":") for line in problems}
    assert named == {f"tool.kiln.{key}" for key in [*bad, *unknown]}, problems
    assert len(problems) == len(bad) + len(unknown)
    assert all("\n" not in line and len(line) < 400 for line in problems)
    validate = fastjsonschema.compile(schema())
    with pytest.raises(fastjsonschema.JsonSchemaException):
        validate(table)
    assert table_problems(good) == []
    validate(good)


# -- the CLI: kiln -C DIR, exit 2 with one line per problem ------------------------------------------------------

def test_kiln_dash_c_serves_that_project_and_reports_each_problem(tmp_path: Path) -> None:
    root = write_project(tmp_path / "p", {"package": "9lives", "build": "make", "bogus": True})
    run = subprocess.run([*KILN, "-C", str(root), "wheels"], capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 3, run.stderr
    assert all(line.startswith("kiln wheels: tool.kiln.") for line in lines)
    assert "Traceback" not in run.stderr
    missing = subprocess.run([*KILN, "-C", str(tmp_path / "nowhere"), "wheels"], capture_output=True, text=True)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1, missing.stderr


def test_kiln_cmake_dir_names_the_cmake_package() -> None:
    run = subprocess.run([*KILN, "--cmake-dir"], capture_output=True, text=True, check=True)
    path = Path(run.stdout.strip())
    assert path == REPO / "cmake"
    assert (path / "KilnConfig.cmake").is_file()


def test_kiln_offers_builds_the_entry_points_its_wheel_declares(tmp_path: Path) -> None:
    """What `kiln wheels` puts on a build's path (kiln-path: kiln_tool and torch-kiln's entry points) is what
    the installed wheel declares: scikit-build-core finds `provider = "kiln"` and the CMake package either way."""
    import importlib.metadata

    import tomllib

    from kiln_tool import resources
    from kiln_tool.build_env import kiln_import_root

    declared = tomllib.loads((REPO / "packaging" / "kiln" / "pyproject.toml").read_text())["project"]
    assert {"console_scripts": declared["scripts"], **declared["entry-points"]} == resources.ENTRY_POINTS
    python = tmp_path / "venv" / "bin" / "python"
    root = kiln_import_root(python)
    assert kiln_import_root(python) == root  # again: nothing to change
    dist = next(iter(importlib.metadata.distributions(path=[str(root)])))
    assert dist.metadata["Name"] == "torch-kiln"
    found = {(ep.group, ep.name): ep.value for ep in dist.entry_points}
    assert found[("dynamic_metadata.provider", "kiln")] == "kiln_tool.build_metadata"
    assert (root / "kiln_tool").resolve() == resources.package_dir()
    assert sorted(p.name for p in root.iterdir()) == ["kiln_tool", "torch_kiln-" + dist.version + ".dist-info"]
