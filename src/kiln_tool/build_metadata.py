"""scikit-build-core dynamic-metadata provider: version and torch pin from the project and the build's torch.

A project that builds with kiln's CMake API names it in its pyproject.toml::

    [project]
    dynamic = ["version", "dependencies"]

    [[tool.dynamic-metadata]]
    provider = "kiln_tool.build_metadata"

and gets ``<tool.kiln version>+pt214cu130`` with ``torch>=2.14,<2.15`` (``+cu130`` with ``torch>=<min>`` for a
stable-ABI build). scikit-build-core runs it in the project's folder.

With ``KILN_SDIST=1`` (set by ``kiln sdist``) it gives the plain base version and an unpinned ``torch``: the sdist
is one per version, for every torch. A wheel built from that sdist (``pip install --no-binary``) runs this
provider again, without KILN_SDIST, and is pinned (and described by its build info) for the torch it finds, but
keeps the sdist's plain version: pip compares the built wheel's version with the sdist's file name and discards a
labelled one ("inconsistent version: expected '0.3.0', but metadata has '0.3.0+pt214cu130'").
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .matrix_data import MatrixError, load_matrix
from .project import KilnProject, ProjectError, current_project
from .torch_probe import TorchInstall, find_torch
from .variant import BuildVariant, resolve_variant, torch_requirement, wheel_version
from .wheel_settings import exclude_sources_in_build

SDIST_ENV = "KILN_SDIST"


def stable_min_torch(project: KilnProject) -> str:
    """The oldest torch a stable-ABI wheel supports (TORCH_TARGET_VERSION, the metadata's torch>= and the build
    info's torch_min), from the project's matrix. kiln's is 2.11, not 2.13: built for 2.13, every shim call
    needs torch_exception_get_what*, which 2.11 lacks."""
    data = load_matrix(Path(project.matrix_file))
    try:
        return str(data["stable_abi"]["min_torch"])
    except (KeyError, TypeError):
        raise MatrixError(f"{project.matrix_file}: no stable_abi.min_torch") from None


def from_unlabelled_sdist(folder: Path, base: str) -> bool:
    """Whether ``folder`` is an unpacked sdist made by ``kiln sdist``: its PKG-INFO's version is the plain base."""
    pkg_info = folder / "PKG-INFO"
    if not pkg_info.is_file():
        return False
    head = pkg_info.read_text(encoding="utf-8", errors="replace").split("\n\n", 1)[0]
    return any(line == f"Version: {base}" for line in head.splitlines())


def build_version(project: KilnProject, torch: TorchInstall, variant: BuildVariant, base: str) -> str:
    """The version a build of ``project`` gets: labelled for its torch, or the plain ``base`` when it builds from
    kiln's unlabelled sdist (the metadata and the build info agree on it)."""
    return base if from_unlabelled_sdist(project.root, base) else wheel_version(torch, variant, base)


def dynamic_metadata(settings: Mapping[str, Any], project: Mapping[str, Any]) -> dict[str, Any]:
    del settings, project
    kiln = current_project()
    if kiln.build == "kiln":
        # The build's wheel leaves the C/C++/CUDA sources out unless the table ships them: pip wheel ., python -m
        # build and the adopter's own cibuildwheel pass no exclusion of their own (kiln_tool.wheel_settings).
        exclude_sources_in_build(kiln.ship_sources)
    if kiln.version is None:
        raise ProjectError(["tool.kiln: the metadata provider needs the base version (version or version-file)"])
    if os.environ.get(SDIST_ENV, "").strip() == "1":
        return {"version": kiln.version, "dependencies": ["torch"]}
    torch = find_torch()
    variant = resolve_variant(torch, project=kiln)
    return {
        "version": build_version(kiln, torch, variant, kiln.version),
        "dependencies": [torch_requirement(torch, variant, stable_min_torch(kiln))],
    }
