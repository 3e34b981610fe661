"""twinlibs: two op libraries, each loaded with torch.ops.load_library; the ops are torch.ops.twinlibs.*."""

from __future__ import annotations

import torch

from ._kiln import guard  # kiln's import guard, added to the wheel by `kiln wheels` (docs/import-guard.md)

guard.load(__name__)  # preflight, then both libraries (torch.ops.load_library), then every op proven registered


def axpy(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    """alpha * x + y (float32, CPU)."""
    return torch.ops.twinlibs.axpy(x, y, alpha)


def prefix_sum(x: torch.Tensor) -> torch.Tensor:
    """The inclusive running sum over the last dimension, like torch.cumsum(x, -1) (float32, CPU)."""
    return torch.ops.twinlibs.prefix_sum(x)


__all__ = ["axpy", "prefix_sum"]
