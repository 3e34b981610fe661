"""Who this guard belongs to (from where it lies) and the build info the same kiln wrote beside it."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import cache
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from typing import Any

GUARD_DIR = Path(__file__).resolve().parent
PACKAGE_DIR = GUARD_DIR.parent
"""The package the guard guards: the folder holding ``_kiln/`` and ``_build_info.json``."""
PACKAGE = (__package__ or "").rpartition(".")[0]
"""Its import name: ``opkiln`` for ``opkiln._kiln``."""
BUILD_INFO_FILE = PACKAGE_DIR / "_build_info.json"
PREFIX = re.sub(r"[^A-Za-z0-9]", "_", PACKAGE).upper()
"""Prefix of the guard's environment variables: the package name upper-cased (``OPKILN``)."""
SKIP_ENV = f"{PREFIX}_SKIP_PREFLIGHT"
INDEX_URL_ENV = f"{PREFIX}_INDEX_URL"
KINDS = ("python-module", "load-library")


MAX_BUILD_INFO_BYTES = 1024 * 1024
"""The largest build info the guard reads; kiln writes a few kilobytes."""
_TEXT_LIMIT = 4096
_LIST_LIMIT = 10_000
_OP_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*::[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)?")
_TARGET_RE = re.compile(r"[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*(?:=[a-z-]+)?")
_DOTTED_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")

_TEXT, _TEXT_OR_NULL, _TEXT_LIST, _BOOL_OR_NULL, _INT, _INT_OR_NULL = "text", "text|null", "[text]", "bool|null", \
    "int", "int|null"
BUILD_INFO_FIELDS: dict[str, str] = {
    "schema": _INT, "project": _TEXT_OR_NULL, "package": _TEXT_OR_NULL, "namespace": _TEXT_OR_NULL,
    "build": _TEXT_OR_NULL, "libraries": _TEXT_OR_NULL, "index_url": _TEXT_OR_NULL, "version": _TEXT_OR_NULL,
    "abi_mode": _TEXT_OR_NULL, "torch_version": _TEXT_OR_NULL, "torch_major_minor": _TEXT_OR_NULL,
    "torch_min": _TEXT_OR_NULL, "cuda": _TEXT_OR_NULL, "cuda_tag": _TEXT_OR_NULL, "cuda_archs": _TEXT_LIST,
    "cxx11_abi": _BOOL_OR_NULL, "cxx_standard": _INT_OR_NULL, "compiler": _TEXT_OR_NULL,
    "nvcc_version": _TEXT_OR_NULL, "cmake_version": _TEXT_OR_NULL, "flags": "{text: [text]}",
    "python_tag": _TEXT_OR_NULL, "extension_suffix": _TEXT_OR_NULL, "platform": _TEXT_OR_NULL,
    "git_commit": _TEXT_OR_NULL, "source_hash": _TEXT_OR_NULL, "ops": _TEXT_LIST, "targets": "[text]|null",
}
"""Every field the guard reads and its JSON type (kiln_tool.build_info writes them). Other keys are kept but
must hold bounded, printable data like the rest."""


class BuildInfoMissing(ImportError):
    """The package has no readable, valid build info: it was not installed from a kiln-built wheel, or the file
    was damaged or replaced after install."""


def _is_text(value: object) -> bool:
    return isinstance(value, str) and len(value) <= _TEXT_LIMIT and value.isprintable()


def _text_list(value: object) -> bool:
    return isinstance(value, list) and len(value) <= _LIST_LIMIT and all(_is_text(v) for v in value)


def _matches(kind: str, value: object) -> bool:
    if kind == _INT:
        return type(value) is int
    if kind == _INT_OR_NULL:
        return value is None or type(value) is int
    if kind == _BOOL_OR_NULL:
        return value is None or isinstance(value, bool)
    if kind == _TEXT:
        return _is_text(value)
    if kind == _TEXT_OR_NULL:
        return value is None or _is_text(value)
    if kind == _TEXT_LIST:
        return _text_list(value)
    if kind == "[text]|null":
        return value is None or _text_list(value)
    if kind == "{text: [text]}":
        return isinstance(value, dict) and all(_is_text(k) and _text_list(v) for k, v in value.items())
    raise AssertionError(kind)


def _printable_json(value: object, depth: int = 0) -> bool:
    """Keys the guard does not read: any JSON, but every string printable and bounded, nested at most 8 deep."""
    if depth > 8:
        return False
    if isinstance(value, str):
        return _is_text(value)
    if isinstance(value, list):
        return len(value) <= _LIST_LIMIT and all(_printable_json(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(_is_text(k) and _printable_json(v, depth + 1) for k, v in value.items())
    return value is None or isinstance(value, (bool, int, float))


def validate(data: object) -> list[str]:
    """Why ``data`` is not a build info this guard can use (one phrase each); empty when it is."""
    if not isinstance(data, dict):
        return [f"it holds a JSON {type(data).__name__}, not an object"]
    errors = [f"{key!r} is not {kind}" for key, kind in BUILD_INFO_FIELDS.items()
              if key in data and not _matches(kind, data[key])]
    errors += [f"the key {key[:40]!r} holds data that is not printable text" for key in data
               if key not in BUILD_INFO_FIELDS and not (_is_text(key) and _printable_json(data[key]))]
    if errors:
        return errors
    errors += [f"op {op[:60]!r} is not namespace::name" for op in data.get("ops", []) if not _OP_RE.fullmatch(op)]
    errors += [f"target {t[:60]!r} is not a package path" for t in data.get("targets") or []
               if not _TARGET_RE.fullmatch(t) or ".." in t.split("=")[0].split("/")]
    if data.get("package") is not None and not _DOTTED_RE.fullmatch(data["package"]):
        errors.append(f"package {data['package'][:60]!r} is not an import name")
    from . import shell

    for key, check in (("project", shell.dist_name), ("index_url", shell.url)):
        if data.get(key):
            try:
                check(data[key], key)
            except shell.UnsafeValue as exc:
                errors.append(str(exc))
    if data.get("version"):
        try:
            shell.version(data["version"], "version")
        except shell.UnsafeValue as exc:
            errors.append(str(exc))
    return errors


def reinstall_command() -> str:
    """``pip install --force-reinstall --no-deps <distribution>``: the distribution whose RECORD lists the build
    info (its name as installed), else the package's import name."""
    from . import record, shell

    owner = record.owner(BUILD_INFO_FILE, [site_root()])
    name = owner.name if owner is not None else PACKAGE.split(".")[0]
    try:
        name = shell.dist_name(name, "the distribution's name")
    except shell.UnsafeValue:
        name = PACKAGE.split(".")[0]
    return shell.command("pip", "install", "--force-reinstall", "--no-deps", name)


def _refuse(why: str) -> BuildInfoMissing:
    return BuildInfoMissing(f"{BUILD_INFO_FILE}: {why}. Reinstall {PACKAGE}: {reinstall_command()}", name=PACKAGE)


@cache
def _load() -> dict[str, Any]:
    try:
        if BUILD_INFO_FILE.exists() and not BUILD_INFO_FILE.is_file():
            raise _refuse("is not a regular file")  # a FIFO would block the import forever
        if not BUILD_INFO_FILE.is_file():
            raise FileNotFoundError(BUILD_INFO_FILE)
        with BUILD_INFO_FILE.open("rb") as stream:
            raw = stream.read(MAX_BUILD_INFO_BYTES + 1)
    except FileNotFoundError:
        raise _refuse(f"missing, so this {PACKAGE} was not installed from a wheel or a build") from None
    except OSError as exc:
        raise _refuse(f"cannot be read ({type(exc).__name__}: {exc.strerror or exc})") from None
    if len(raw) > MAX_BUILD_INFO_BYTES:
        raise _refuse(f"larger than {MAX_BUILD_INFO_BYTES} bytes, so it is not the one kiln wrote")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise _refuse(f"is not JSON ({type(exc).__name__})") from None
    errors = validate(data)
    if errors:
        shown = "; ".join(errors[:3]) + (f" and {len(errors) - 3} more" if len(errors) > 3 else "")
        raise _refuse(f"is not a valid kiln build info ({shown})")
    assert isinstance(data, dict)
    return data


def build_info() -> dict[str, Any]:
    """What this package was built for and from: versions, CUDA archs, ABI, flags, commit, op manifest."""
    return dict(_load())


def distribution(info: Mapping[str, Any]) -> str:
    """The name pip installs it by (the project, checked by ``validate`` as a distribution name), else the
    package's top-level import name."""
    return str(info.get("project") or PACKAGE.split(".")[0])


def doctor_command() -> str:
    """``python -m <package> doctor`` where the package's own ``__main__`` hands over to the guard's (it names
    ``_kiln``), else ``python -m <package>._kiln doctor``, which every kiln-built package has."""
    try:
        own = "_kiln" in (PACKAGE_DIR / "__main__.py").read_text()
    except OSError:
        own = False
    from .shell import command

    return command("python", "-m", f"{PACKAGE}{'' if own else '._kiln'}", "doctor")


def site_root() -> Path:
    """The folder the wheel was installed into (site-packages): the package folder minus its dotted depth."""
    return PACKAGE_DIR.parents[PACKAGE.count(".")]


def targets(info: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(path relative to the wheel's root without suffix, kind) of each library the guard loads, in order.

    From the build info's ``targets`` (``["opkiln/_C=python-module"]``-style entries, as kiln writes them);
    a build info without them (written by an older kiln) means ``<package>/_C`` as a Python module, or every
    library beside ``__init__.py`` for ``libraries = "load-library"``."""
    declared = info.get("targets")
    if isinstance(declared, list) and declared:
        found = []
        for entry in declared:
            path, _, kind = str(entry).partition("=")
            found.append((path, kind if kind in KINDS else str(info.get("libraries") or "python-module")))
        return found
    base = PACKAGE.replace(".", "/")
    if info.get("libraries") == "load-library":
        stems = sorted({p.name.split(".", 1)[0] for p in PACKAGE_DIR.glob("*.so") if p.is_file()})
        return [(f"{base}/{stem}", "load-library") for stem in stems]
    return [(f"{base}/_C", "python-module")]


def module_name(path: str) -> str:
    return path.replace("/", ".")


def library_files(path: str) -> list[Path]:
    """The files on disk that could be the library ``path`` (one per suffix this Python knows)."""
    root = site_root() / path
    return [root.with_name(root.name + suffix) for suffix in EXTENSION_SUFFIXES
            if root.with_name(root.name + suffix).is_file()]


def compiled_files(info: Mapping[str, Any]) -> list[Path]:
    """Every compiled file of the declared libraries that is on disk (any suffix), sorted."""
    found: set[Path] = set()
    for path, _kind in targets(info):
        root = site_root() / path
        found.update(p for p in root.parent.glob(root.name + ".*") if ".so" in p.name or p.suffix == ".pyd")
    return sorted(found)
