"""The project kiln serves: the ``[tool.kiln]`` table of a pyproject.toml, checked against its schema.

Every kiln command serves the project of the current directory (``kiln -C DIR`` changes into DIR first).
The table is small; everything it leaves out has a default (data/tool-kiln.schema.json says each key)::

    [tool.kiln]
    package = "ringops"          # import package (default: the name with - and . as _; the name is [project]'s,
                                 # or, a setup.py project without [project], setup(name="...")'s)
    namespace = "ringops"        # torch.ops.<namespace> (default: the package)
    build = "kiln"               # or "backend": the project's own PEP 517 backend
    libraries = "python-module"  # or "load-library" (torch.ops.load_library)
    abi = ["torch"]              # and/or "stable"; the first is the default
    version = "0.3.0"            # or version-file = "VERSION" (kiln builds)
    index-url = "https://example.org/wheels"
    matrix = "kiln"              # or the path of the project's own matrix.json

Standard library only: `kiln matrix` and `kiln venv` run on a bare Python, and scikit-build-core's
metadata provider and the configure step (kiln_tool.build_config, kiln_tool.build_info) load the table
inside a build venv. The schema is
interpreted here for the subset of JSON Schema it uses, so every bad key gets its own line; the test
suite holds this reading equal to a full JSON Schema validator's on generated tables.
"""

from __future__ import annotations

import functools
import json
import keyword
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .resources import data_path

PYPROJECT = "pyproject.toml"
PROJECT_DIR_ENV = "KILN_PROJECT_DIR"
MAX_PYPROJECT_BYTES = 1 << 20
MAX_VERSION_FILE_BYTES = 200
SCHEMA_FILE = "tool-kiln.schema.json"
SCIKIT_BUILD_BACKEND = "scikit_build_core.build"
_NAME = re.compile(r"^([A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$", re.IGNORECASE)


def canonical_name(name: str) -> str:
    """PEP 503's normal form of a distribution name (packaging.utils.canonicalize_name's rule)."""
    return re.sub(r"[-_.]+", "-", name).lower()


class ProjectError(ValueError):
    """The project's configuration is unusable: one line per problem (exit 2)."""

    exit_code = 2

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class KilnProject:
    """A project kiln builds: its folder and its ``[tool.kiln]`` table with the defaults filled in."""

    root: Path
    name: str
    """The distribution name, canonical (PEP 503)."""
    package: str
    namespace: str
    build: str
    libraries: str
    abi_modes: tuple[str, ...]
    version: str | None
    """The base version of a kiln build (from ``version`` or ``version-file``); None for a backend build
    that takes its backend's."""
    index_url: str | None
    matrix_file: Path
    schema_sources: tuple[str, ...] = ()
    ship_sources: bool = False
    """A kiln build's wheel keeps the C/C++/CUDA sources its package folder holds (tool.kiln.ship-sources)."""
    wheel_exclude: tuple[str, ...] = ()
    """[tool.scikit-build] wheel.exclude: the project's own patterns, which kiln's source patterns extend."""
    install_samples: Path | None = None
    """A test file or folder whose INSTALL_SAMPLES are called after an install (kiln_tool.op_smoke)."""
    build_requires: tuple[str, ...] = ()
    """[build-system] requires: what a backend build's venv needs beside torch and kiln's toolchain."""

    @property
    def wheel_name(self) -> str:
        """The name as wheel file names spell it (PEP 427: the canonical name with ``-`` as ``_``)."""
        return self.name.replace("-", "_")

    @property
    def default_abi_mode(self) -> str:
        return self.abi_modes[0]


def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(data_path(SCHEMA_FILE).read_text())
    return loaded


def _type_ok(value: Any, expected: str) -> bool:
    if expected == "string":
        return isinstance(value, str)
    if expected == "array":
        return isinstance(value, list)
    if expected == "object":
        return isinstance(value, dict)
    if expected == "boolean":
        return isinstance(value, bool)
    raise ValueError(f"schema type {expected!r} is not one this reader knows")


def _shown(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _problem(where: str, value: Any, rule: dict[str, Any]) -> str | None:
    """Why ``value`` breaks ``rule`` (the subset of JSON Schema tool-kiln.schema.json uses), or None."""
    if "enum" in rule and value not in rule["enum"]:
        return f"{where} = {_shown(value)} is not one of {', '.join(json.dumps(v) for v in rule['enum'])}"
    expected = rule.get("type")
    if expected is not None and not _type_ok(value, expected):
        kind = {"string": "a string", "array": "a list", "object": "a table", "boolean": "true or false"}[expected]
        return f"{where} = {_shown(value)} is not {kind}"
    if isinstance(value, str):
        if "maxLength" in rule and len(value) > rule["maxLength"]:
            return f"{where} is longer than {rule['maxLength']} characters"
        # fullmatch: re.search with a pattern ending in $ takes "0.3.0\n" (a $ matches before a final newline).
        if "pattern" in rule and not re.fullmatch(rule["pattern"], value):
            return f"{where} = {_shown(value)} is not {_PATTERN_WORDS.get(where.split('[')[0], 'allowed')}"
    if isinstance(value, list):
        if "minItems" in rule and len(value) < rule["minItems"]:
            return f"{where} needs at least {rule['minItems']} item(s)"
        if "maxItems" in rule and len(value) > rule["maxItems"]:
            return f"{where} has more than {rule['maxItems']} items"
        if rule.get("uniqueItems") and len({json.dumps(v, sort_keys=True) for v in value}) != len(value):
            return f"{where} lists an item twice"
        for index, item in enumerate(value):
            problem = _problem(f"{where}[{index}]", item, rule.get("items", {}))
            if problem:
                return problem
    return None


_PATTERN_WORDS = {
    "tool.kiln.package": "a Python identifier (letters, digits, _; at most 64)",
    "tool.kiln.namespace": "a C++/Python identifier (letters, digits, _; at most 64)",
    "tool.kiln.version": "a PEP 440 release version without a local label (kiln adds +pt214cu130)",
    "tool.kiln.version-file": "a relative path inside the project",
    "tool.kiln.index-url": "an http(s) URL without spaces or quotes",
    "tool.kiln.matrix": "\"kiln\" or a relative path inside the project",
    "tool.kiln.schema-sources": "a relative glob pattern inside the project",
    "tool.kiln.install-samples": "a relative path inside the project",
}


MAX_UNKNOWN_SHOWN = 5
"""At most this many unknown keys are named, one line each; the rest are counted (a huge table prints little)."""


@functools.cache
def reserved_names() -> tuple[frozenset[str], frozenset[str]]:
    """(top-level packages a wheel may not install over, op namespaces torch reserves): data/reserved-names.json
    plus Python's own standard library."""
    data = json.loads(data_path("reserved-names.json").read_text())
    packages = frozenset(data["packages"]) | frozenset(getattr(sys, "stdlib_module_names", ()))
    return packages, frozenset(data["namespaces"])


def name_problems(package: str, namespace: str, where_package: str = "tool.kiln.package",
                  where_namespace: str = "tool.kiln.namespace") -> list[str]:
    """Why ``package`` or ``namespace`` would harm what is installed beside the wheel (empty when neither)."""
    packages, namespaces = reserved_names()
    problems = []
    if package in packages or package.lower() in packages:
        problems.append(f"{where_package} = {package!r} is the standard library's or a well-known distribution's "
                        "import name: the wheel would install over it (choose a name of your own)")
    if namespace in namespaces:
        problems.append(f"{where_namespace} = {namespace!r} is an op namespace torch reserves: registering it "
                        "would abort or alter torch (choose a namespace of your own)")
    return problems


def table_problems(table: Any) -> list[str]:
    """One line per bad key or value of a ``[tool.kiln]`` table, in key order (empty when it holds); unknown
    keys are named up to MAX_UNKNOWN_SHOWN and counted beyond."""
    spec = schema()
    if not isinstance(table, dict):
        return [f"tool.kiln = {_shown(table)} is not a table"]
    problems = []
    properties: dict[str, Any] = spec["properties"]
    unknown = [key for key in table if key not in properties]
    for key in sorted(unknown, key=str)[:MAX_UNKNOWN_SHOWN]:
        # A key is shown as itself when printable and short, else escaped and cut (a key cannot forge lines).
        shown = key if isinstance(key, str) and key.isprintable() and len(key) <= 60 else _shown(str(key))
        problems.append(f"tool.kiln.{shown}: unknown key (known: {', '.join(sorted(properties))})")
    if len(unknown) > MAX_UNKNOWN_SHOWN:
        problems.append(f"tool.kiln: {len(unknown) - MAX_UNKNOWN_SHOWN} more unknown keys")
    flagged = set()
    for key in sorted(k for k in table if k in properties):
        problem = _problem(f"tool.kiln.{key}", table[key], properties[key])
        if problem:
            problems.append(problem)
            flagged.add(key)
    for key in ("version-file", "matrix", "install-samples"):
        value = table.get(key)
        # One line per mistake: a value the schema refused already has its line.
        if key not in flagged and isinstance(value, str) and ".." in Path(value).parts:
            problems.append(f"tool.kiln.{key} = {_shown(value)} lies outside the project")
    patterns = table.get("schema-sources")
    if isinstance(patterns, list) and "schema-sources" not in flagged:
        problems += [f"tool.kiln.schema-sources = {_shown(p)} lies outside the project" for p in patterns
                     if isinstance(p, str) and ".." in Path(p).parts]
    if "version" in table and "version-file" in table:
        problems.append("tool.kiln: version and version-file both set; give one")
    return problems


def _read_pyproject(root: Path) -> dict[str, Any]:
    path = root / PYPROJECT
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_PYPROJECT_BYTES + 1)
    except FileNotFoundError:
        raise ProjectError([f"{root}: no {PYPROJECT} (kiln serves the project of the current directory; "
                            "kiln -C DIR for another)"]) from None
    except OSError as exc:
        raise ProjectError([f"{path}: unreadable ({exc.strerror})"]) from None
    if len(raw) > MAX_PYPROJECT_BYTES:
        raise ProjectError([f"{path}: larger than {MAX_PYPROJECT_BYTES} bytes"])
    # Imported here: kiln audit reaches this module (project_dir) without ever reading a pyproject.toml.
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    try:
        document: dict[str, Any] = tomllib.loads(raw.decode("utf-8"))
        return document
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ProjectError([f"{path}: not valid TOML ({exc})"]) from None


def _inside(root: Path, relative: str, key: str, regular: bool = False) -> Path:
    """``relative`` resolved (symlinks followed) inside ``root``; with ``regular``, it must be a regular file
    there (a FIFO or device would block or never end a read)."""
    candidate = (root / relative).resolve()
    if ".." in Path(relative).parts or not candidate.is_relative_to(root.resolve()):
        raise ProjectError([f"tool.kiln.{key} = {relative!r} lies outside the project"])
    if regular and candidate.exists() and not candidate.is_file():
        raise ProjectError([f"tool.kiln.{key} = {relative!r} is not a regular file"])
    return candidate


def _version_from_file(root: Path, relative: str) -> str:
    path = _inside(root, relative, "version-file", regular=True)
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_VERSION_FILE_BYTES + 1)
    except OSError as exc:
        raise ProjectError([f"tool.kiln.version-file = {relative!r}: cannot read it ({exc.strerror})"]) from None
    text = raw.decode("utf-8", errors="replace").strip()
    rule = schema()["properties"]["version"]
    if len(raw) > MAX_VERSION_FILE_BYTES or _problem("tool.kiln.version", text, rule):
        raise ProjectError([f"tool.kiln.version-file = {relative!r} does not hold one PEP 440 release version "
                            "without a local label (like 0.3.0)"])
    return text


def _wheel_exclude(tool: dict[str, Any], root: Path) -> tuple[str, ...]:
    skbuild = tool.get("scikit-build")
    wheel = skbuild.get("wheel") if isinstance(skbuild, dict) else None
    patterns = wheel.get("exclude", []) if isinstance(wheel, dict) else []
    if not isinstance(patterns, list) or not all(isinstance(p, str) and ";" not in p for p in patterns):
        raise ProjectError([f"{root / PYPROJECT}: [tool.scikit-build] wheel.exclude is not a list of patterns "
                            "without ';'"])
    return tuple(patterns)


def load_project(root: Path, document: dict[str, Any] | None = None) -> KilnProject:
    """The project in ``root``: its pyproject.toml's [project] name and [tool.kiln] table (ProjectError, one
    line per problem, when either is missing or wrong). ``document``: that file as already parsed."""
    root = root.resolve()
    if document is None:
        document = _read_pyproject(root)
    project = document.get("project")
    name = project.get("name") if isinstance(project, dict) else None
    tool = document.get("tool")
    if not isinstance(tool, dict) or "kiln" not in tool:
        raise ProjectError([f"{root / PYPROJECT}: no [tool.kiln] table (README: Adopting kiln in your op library)"])
    table = tool["kiln"]
    problems = table_problems(table)
    if problems:
        raise ProjectError(problems)
    build_system = document.get("build-system")
    build_system = build_system if isinstance(build_system, dict) else {}
    backend = build_system.get("build-backend")
    requires = build_system.get("requires", [])
    if not isinstance(requires, list) or len(requires) > 64 or not all(
            isinstance(r, str) and 0 < len(r) <= 200 and "\n" not in r for r in requires):
        raise ProjectError([f"{root / PYPROJECT}: [build-system] requires is not a list of at most 64 requirements"])
    build = table.get("build", "kiln" if backend == SCIKIT_BUILD_BACKEND else "backend")
    if not isinstance(project, dict) and build == "backend":
        from .backend_build import setup_name

        name = setup_name(root)  # a setup.py project without a [project] table: its backend's own name
        if not isinstance(name, str) or not _NAME.match(name):
            raise ProjectError([f"{root / PYPROJECT}: no [project] table, and neither setup.cfg's [metadata] name "
                                "nor a literal setup(name=\"...\") in setup.py gives a valid distribution name"])
    if not isinstance(name, str) or not _NAME.match(name):
        raise ProjectError([f"{root / PYPROJECT}: [project] name is missing or not a valid distribution name"])
    canonical = canonical_name(name)
    package = table.get("package", re.sub(r"[-.]+", "_", name).lower())
    if not package.isidentifier() or keyword.iskeyword(package):
        where = "tool.kiln.package" if "package" in table else "tool.kiln.package (default, from [project] name)"
        raise ProjectError([f"{where} = {package!r} cannot be imported (not an identifier, or a Python keyword)"])
    namespace = table.get("namespace", package)
    reserved = name_problems(package, namespace,
                             "tool.kiln.package" if "package" in table else
                             "tool.kiln.package (default, from [project] name)",
                             "tool.kiln.namespace" if "namespace" in table else
                             "tool.kiln.namespace (default, the package)")
    if reserved:
        raise ProjectError(reserved)
    if keyword.iskeyword(namespace):
        raise ProjectError([f"tool.kiln.namespace = {namespace!r} is a Python keyword: torch.ops.{namespace} "
                            "cannot be written"])
    version = table.get("version")
    if "version-file" in table:
        version = _version_from_file(root, table["version-file"])
    if build == "kiln" and version is None:
        raise ProjectError(['tool.kiln: build = "kiln" needs the base version: version = "X.Y.Z" or '
                            'version-file = "FILE" (the metadata provider adds the label)'])
    matrix = table.get("matrix", "kiln")
    matrix_file = data_path("matrix.json") if matrix == "kiln" else _inside(root, matrix, "matrix", regular=True)
    if not matrix_file.is_file():
        raise ProjectError([f"tool.kiln.matrix = {matrix!r}: no such file"])
    samples = table.get("install-samples")
    # Only where a wheel is exercised after an install (kiln_tool.op_smoke) does the path have to exist: a
    # release from a checkout without the project's tests still reads the table.
    samples_path = _inside(root, samples, "install-samples") if samples is not None else None
    if samples_path is not None and samples_path.exists() and not (samples_path.is_file() or samples_path.is_dir()):
        raise ProjectError([f"tool.kiln.install-samples = {samples!r} is neither a regular file nor a folder"])
    return KilnProject(
        root=root, name=canonical, package=package, namespace=namespace, build=build,
        libraries=table.get("libraries", "python-module"), abi_modes=tuple(table.get("abi", ["torch"])),
        version=version, index_url=table.get("index-url"), matrix_file=matrix_file,
        schema_sources=tuple(table.get("schema-sources", ())), ship_sources=table.get("ship-sources", False),
        wheel_exclude=_wheel_exclude(tool, root), install_samples=samples_path,
        build_requires=tuple(requires))


def project_dir() -> Path:
    """The folder of the project being served: $KILN_PROJECT_DIR, else the current directory."""
    return Path(os.environ.get(PROJECT_DIR_ENV) or Path.cwd())


@functools.lru_cache(maxsize=16)
def _load_cached(root: Path, stamp: tuple[int, int, int]) -> KilnProject:
    # stamp: part of the cache key, so an edited pyproject.toml is read again; the file is parsed once per state
    # (find_project asks whether it has a table first).
    return load_project(root, _document_cached(root, stamp))


def current_project() -> KilnProject:
    """The project of the current directory (or $KILN_PROJECT_DIR); ProjectError when there is none.
    Read once per pyproject.toml state (an index of thousands of wheels asks for it per wheel)."""
    root = project_dir().resolve()
    try:
        st = (root / PYPROJECT).stat()
    except OSError:
        return load_project(root)  # the one-line ProjectError of a missing or unreadable file
    return _load_cached(root, (st.st_mtime_ns, st.st_size, st.st_ino))


def find_project(root: Path | None = None) -> KilnProject | None:
    """The project in ``root`` (default: the current one), or None when it has no pyproject.toml or no
    [tool.kiln] table; a table that is there but wrong is still a ProjectError."""
    root = (project_dir() if root is None else root).resolve()
    try:
        st = (root / PYPROJECT).stat()
    except OSError:
        return None
    if not _has_table(root, (st.st_mtime_ns, st.st_size, st.st_ino)):
        return None
    return _load_cached(root, (st.st_mtime_ns, st.st_size, st.st_ino))


def project_wheel(filename: str, project: str | None = None) -> bool:
    """Whether a wheel file name claims ``project`` (default: the project kiln serves here, if any), so that
    the kiln-wheel definition (kiln_tool.kiln_wheel) applies to it."""
    if project is None:
        found = find_project()
        if found is None:
            return False
        project = found.name
    return canonical_name(filename.split("-", 1)[0]) == project


@functools.lru_cache(maxsize=16)
def _document_cached(root: Path, stamp: tuple[int, int, int]) -> dict[str, Any]:
    del stamp
    return _read_pyproject(root)


def _has_table(root: Path, stamp: tuple[int, int, int]) -> bool:
    tool = _document_cached(root, stamp).get("tool")
    return isinstance(tool, dict) and "kiln" in tool


__all__ = ["PROJECT_DIR_ENV", "KilnProject", "ProjectError", "current_project", "find_project", "load_project",
           "project_dir", "project_wheel", "schema", "table_problems"]
