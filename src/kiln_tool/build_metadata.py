"""scikit-build-core dynamic-metadata provider: version and torch pin from the build's torch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .matrix_data import load_matrix
from .torch_probe import find_torch
from .variant import resolve_variant, torch_requirement, wheel_version

# The oldest torch a stable-ABI wheel supports (TORCH_TARGET_VERSION, the metadata's
# torch>= and the build info's torch_min), from data/matrix.json. 2.11, not 2.13: built
# for 2.13, every shim call needs torch_exception_get_what*, which 2.11 lacks.
STABLE_ABI_MIN_TORCH: str = str(load_matrix()["stable_abi"]["min_torch"])


def dynamic_metadata(settings: Mapping[str, Any], project: Mapping[str, Any]) -> dict[str, Any]:
    del settings, project
    torch = find_torch()
    variant = resolve_variant(torch)
    return {
        "version": wheel_version(torch, variant),
        "dependencies": [torch_requirement(torch, variant, STABLE_ABI_MIN_TORCH)],
    }
