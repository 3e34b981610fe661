"""A kiln build's wheel leaves the C, C++ and CUDA sources out, however scikit-build-core is run.

scikit-build-core's ``wheel.packages`` copies a package folder whole, and many op libraries keep their kernels
inside it (``mmcv/ops/csrc``, ``torchvision/csrc``). ``kiln wheels`` and ``kiln cibuildwheel`` pass the exclusion
themselves (``wheel_exclude``: the project's own list, after its matching overrides, plus ``SOURCE_PATTERNS``), but an
adopter also builds with ``pip wheel .``, ``python -m build``, ``pip install .`` or a cibuildwheel configuration of
its own, where kiln passes nothing. What every one of those runs is kiln's dynamic-metadata provider
(``[[tool.dynamic-metadata]] provider = "kiln"``, kiln_tool.build_metadata), inside scikit-build-core's build and
before the wheel's files are chosen; it calls ``exclude_sources_in_build``, which adds ``SOURCE_PATTERNS`` to that
build's own settings (``settings.wheel.exclude``, the list scikit-build-core then filters the package files and the
wheel with). The table's ``ship-sources = true`` keeps the sources in.

Not an entry point of scikit-build-core's ``scikit-build-core.config.override`` group, which would say the same with
less reaching: pip on Python 3.10 reads a wheel's entry points with pkg_resources, which refuses that group's name
(``Invalid group name``), so torch-kiln could no longer be installed there.

Standard library only.
"""

from __future__ import annotations

import copy
import importlib
import sys
from collections.abc import Mapping
from typing import Any

SOURCE_PATTERNS = ("*.c", "*.cc", "*.cpp", "*.cxx", "*.cu", "*.h", "*.hh", "*.hpp", "*.cuh")
"""What a kiln build's wheel leaves out unless tool.kiln.ship-sources (gitignore syntax, as wheel.exclude reads
it): the C, C++ and CUDA sources and headers a package folder may hold beside its Python files."""

SCIKIT_BUILD_BACKEND = "scikit_build_core.build"


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


def exclude_sources_in_build(ship_sources: bool) -> bool:
    """Add ``SOURCE_PATTERNS`` to the ``wheel.exclude`` of the scikit-build-core build that called us (its settings
    object, found among the callers' locals: ``get_standard_metadata(pyproject, settings)`` holds it), unless
    ``ship_sources``. True when that build's list holds them now; False outside such a build."""
    if ship_sources:
        return False
    frame = sys._getframe(1)
    while frame is not None:
        settings = frame.f_locals.get("settings")
        kind = type(settings)
        if kind.__name__ == "ScikitBuildSettings" and kind.__module__.startswith("scikit_build_core."):
            exclude = getattr(getattr(settings, "wheel", None), "exclude", None)
            if not isinstance(exclude, list):
                return False
            exclude.extend(p for p in SOURCE_PATTERNS if p not in exclude)
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


__all__ = ["SOURCE_PATTERNS", "exclude_sources_in_build", "wheel_exclude"]
