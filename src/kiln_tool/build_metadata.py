"""scikit-build-core dynamic-metadata provider: version and torch pin from the project and the build's torch.

A project that builds with kiln's CMake API names it in its pyproject.toml::

    [project]
    dynamic = ["version", "dependencies"]

    [[tool.dynamic-metadata]]
    provider = "kiln_tool.build_metadata"

and gets ``<tool.kiln version>+pt214cu130`` with ``torch>=2.14,<2.15`` (``+cu130`` with ``torch>=<min>`` for a
stable-ABI build). scikit-build-core runs it in the project's folder.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .matrix_data import MatrixError, load_matrix
from .project import KilnProject, ProjectError, current_project
from .torch_probe import find_torch
from .variant import resolve_variant, torch_requirement, wheel_version


def stable_min_torch(project: KilnProject) -> str:
    """The oldest torch a stable-ABI wheel supports (TORCH_TARGET_VERSION, the metadata's torch>= and the build
    info's torch_min), from the project's matrix. kiln's is 2.11, not 2.13: built for 2.13, every shim call
    needs torch_exception_get_what*, which 2.11 lacks."""
    data = load_matrix(Path(project.matrix_file))
    try:
        return str(data["stable_abi"]["min_torch"])
    except (KeyError, TypeError):
        raise MatrixError(f"{project.matrix_file}: no stable_abi.min_torch") from None


def dynamic_metadata(settings: Mapping[str, Any], project: Mapping[str, Any]) -> dict[str, Any]:
    del settings, project
    kiln = current_project()
    if kiln.version is None:
        raise ProjectError(["tool.kiln: the metadata provider needs the base version (version or version-file)"])
    torch = find_torch()
    variant = resolve_variant(torch, project=kiln)
    return {
        "version": wheel_version(torch, variant, kiln.version),
        "dependencies": [torch_requirement(torch, variant, stable_min_torch(kiln))],
    }
