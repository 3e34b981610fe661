"""ringops: torch.ops.ringops.ring_shift, a ring shift over the last dimension (CPU, and CUDA in CUDA builds)."""

from __future__ import annotations

import torch

from ._kiln import guard  # kiln's import guard, generated into the wheel (docs/import-guard.md)

guard.load(__name__)  # preflight, then _C (registers the ops), then every op of the manifest proven registered


@torch.library.register_fake("ringops::ring_shift")
def _ring_shift_fake(x: torch.Tensor, shift: int) -> torch.Tensor:
    return torch.empty_like(x)


def ring_shift(x: torch.Tensor, shift: int) -> torch.Tensor:
    """x rotated by `shift` places along its last dimension: torch.roll(x, shift, -1) (float32)."""
    return torch.ops.ringops.ring_shift(x, shift)


__all__ = ["ring_shift"]
