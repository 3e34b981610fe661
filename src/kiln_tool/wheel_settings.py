"""kiln's scikit-build-core settings provider: a kiln build's wheel leaves the C, C++ and CUDA sources out.

scikit-build-core's ``wheel.packages`` copies a package folder whole, and many op libraries keep their kernels
inside it (``mmcv/ops/csrc``, ``torchvision/csrc``). ``kiln wheels`` and ``kiln cibuildwheel`` pass the exclusion
themselves, but an adopter also builds with ``pip wheel .``, ``python -m build``, ``pip install .`` or a
cibuildwheel configuration of its own, where kiln passes nothing. So the torch-kiln distribution installs this
function under scikit-build-core's ``scikit-build-core.config.override`` entry-point group: every scikit-build-core
build in an environment that holds kiln (its build requirements name torch-kiln, or the maintainer's venv has it
for ``--no-build-isolation``) calls it, and for a project with a ``[tool.kiln]`` table that builds with kiln's
CMake API it adds ``SOURCE_PATTERNS`` to the project's own ``wheel.exclude``. The table's ``ship-sources = true``
keeps the sources in; any other project gets nothing from here.

An override-level list replaces the project's whole (scikit-build-core takes a list from its highest source), so
the returned list is the project's own ``wheel.exclude``, after the project's ``[[tool.scikit-build.overrides]]``
that match this build where scikit-build-core can evaluate them, and then kiln's patterns. A per-build
``-C wheel.exclude=...`` or ``SKBUILD_WHEEL_EXCLUDE`` still wins, as scikit-build-core documents for every
entry-point provider (``kiln wheels`` and ``kiln cibuildwheel`` give the same list that way).

Standard library only (and tomli on Python 3.10, which scikit-build-core itself requires there); the build's
current folder is the project's (scikit-build-core reads ``pyproject.toml`` from it). It never raises: a
pyproject it cannot read is scikit-build-core's to report.
"""

from __future__ import annotations

import copy
import importlib
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

SOURCE_PATTERNS = ("*.c", "*.cc", "*.cpp", "*.cxx", "*.cu", "*.h", "*.hh", "*.hpp", "*.cuh")
"""What a kiln build's wheel leaves out unless tool.kiln.ship-sources (gitignore syntax, as wheel.exclude reads
it): the C, C++ and CUDA sources and headers a package folder may hold beside its Python files."""

SCIKIT_BUILD_BACKEND = "scikit_build_core.build"
MAX_PYPROJECT_BYTES = 1 << 20


def _own_exclude(skbuild: dict[str, Any], state: str, env: Mapping[str, str] | None) -> list[str] | None:
    """The project's ``wheel.exclude`` for this build: its overrides applied by scikit-build-core's own code when
    that can be had (else the static table's). None when it is not a list of strings (scikit-build-core says so)."""
    table = copy.deepcopy(skbuild)
    table.pop("config-setting", None)
    try:
        # By name: only a scikit-build-core build calls this, and it has scikit-build-core; kiln's own commands
        # never do (kiln_tool.bootstrap's scan of what they import leaves it out).
        overrides = importlib.import_module("scikit_build_core.settings.skbuild_overrides")
        overrides.process_overrides(table, state=state, retry=False, env=env)
    except (Exception, SystemExit):  # another scikit-build-core, or overrides it refuses (it says so itself)
        table = copy.deepcopy(skbuild)
    wheel = table.get("wheel", {})
    patterns = wheel.get("exclude", []) if isinstance(wheel, dict) else []
    if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
        return None
    return patterns


def wheel_exclude(pyproject: dict[str, Any], state: str = "wheel",
                  env: Mapping[str, str] | None = None) -> list[str] | None:
    """The ``wheel.exclude`` a build of ``pyproject`` gets from kiln, or None when kiln has nothing to say (not a
    kiln build, ``ship-sources = true``, an sdist, or a table scikit-build-core or kiln will refuse anyway)."""
    if state == "sdist":
        return None
    tool = pyproject.get("tool")
    kiln = tool.get("kiln") if isinstance(tool, dict) else None
    if not isinstance(kiln, dict):
        return None
    build_system = pyproject.get("build-system")
    backend = build_system.get("build-backend") if isinstance(build_system, dict) else None
    if kiln.get("build", "kiln" if backend == SCIKIT_BUILD_BACKEND else "backend") != "kiln":
        return None
    if kiln.get("ship-sources", False) is not False:
        return None  # true ships them; anything else is refused by the table's schema before a wheel is made
    skbuild = tool.get("scikit-build", {}) if isinstance(tool, dict) else {}
    own = _own_exclude(skbuild if isinstance(skbuild, dict) else {}, state, env)
    if own is None:
        return None
    return [*own, *(p for p in SOURCE_PATTERNS if p not in own)]


def provider(state: str = "wheel", env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The ``scikit-build-core.config.override`` entry point: ``{"wheel": {"exclude": [...]}}`` for a kiln build
    of the project in the current folder, else ``{}``."""
    path = Path("pyproject.toml")
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_PYPROJECT_BYTES + 1)
        if len(raw) > MAX_PYPROJECT_BYTES:
            return {}
        document = tomllib.loads(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}
    patterns = wheel_exclude(document, state, env)
    return {} if patterns is None else {"wheel": {"exclude": patterns}}


__all__ = ["SOURCE_PATTERNS", "provider", "wheel_exclude"]
