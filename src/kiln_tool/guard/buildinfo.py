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


class BuildInfoMissing(ImportError):
    """The package has no readable build info: it was not installed from a kiln-built wheel."""


@cache
def _load() -> dict[str, Any]:
    try:
        data = json.loads(BUILD_INFO_FILE.read_text())
    except FileNotFoundError:
        raise BuildInfoMissing(
            f"{BUILD_INFO_FILE} is missing: this {PACKAGE} was not installed from a wheel or a build. "
            f"Reinstall it (pip install --force-reinstall {PACKAGE} -f <index page>).", name=PACKAGE) from None
    except (OSError, ValueError) as exc:
        raise BuildInfoMissing(f"{BUILD_INFO_FILE} cannot be read ({exc}): reinstall {PACKAGE}.",
                               name=PACKAGE) from None
    if not isinstance(data, dict):
        raise BuildInfoMissing(f"{BUILD_INFO_FILE} is not a JSON object: reinstall {PACKAGE}.", name=PACKAGE)
    return data


def build_info() -> dict[str, Any]:
    """What this package was built for and from: versions, CUDA archs, ABI, flags, commit, op manifest."""
    return dict(_load())


def distribution(info: Mapping[str, Any]) -> str:
    """The name pip installs it by (the project), else the package's."""
    return str(info.get("project") or PACKAGE)


def doctor_command() -> str:
    """``python -m <package> doctor`` where the package's own ``__main__`` hands over to the guard's (it names
    ``_kiln``), else ``python -m <package>._kiln doctor``, which every kiln-built package has."""
    try:
        own = "_kiln" in (PACKAGE_DIR / "__main__.py").read_text()
    except OSError:
        own = False
    return f"python -m {PACKAGE}{'' if own else '._kiln'} doctor"


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
