"""scikit-build-core dynamic-metadata provider: version and torch pin from the build's torch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .torch_probe import find_torch
from .variant import resolve_variant, torch_requirement, wheel_version

STABLE_ABI_MIN_TORCH = "2.11"


def dynamic_metadata(settings: Mapping[str, Any], project: Mapping[str, Any]) -> dict[str, Any]:
    del settings, project
    torch = find_torch()
    variant = resolve_variant(torch)
    return {
        "version": wheel_version(torch, variant),
        "dependencies": [torch_requirement(torch, variant, STABLE_ABI_MIN_TORCH)],
    }
