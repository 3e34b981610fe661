"""A kiln build's wheel leaves the C, C++ and CUDA sources out, however scikit-build-core is run.

scikit-build-core's ``wheel.packages`` copies a package folder whole, and many op libraries keep their kernels
inside it (``mmcv/ops/csrc``, ``torchvision/csrc``). ``kiln wheels`` and ``kiln cibuildwheel`` pass the exclusion
themselves (``-C wheel.exclude=``: the project's own list plus ``SOURCE_PATTERNS``), but an
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

import sys

SOURCE_PATTERNS = ("*.c", "*.cc", "*.cpp", "*.cxx", "*.cu", "*.h", "*.hh", "*.hpp", "*.cuh")
"""What a kiln build's wheel leaves out unless tool.kiln.ship-sources (gitignore syntax, as wheel.exclude reads
it): the C, C++ and CUDA sources and headers a package folder may hold beside its Python files."""


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


__all__ = ["SOURCE_PATTERNS", "exclude_sources_in_build"]
