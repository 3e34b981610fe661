"""segops: segment sums over sorted segment ids; the op is torch.ops.segops.segment_sum."""

from __future__ import annotations

import torch

from ._kiln import guard

guard.load(__name__)


def segment_sum(src: torch.Tensor, index: torch.Tensor, size: int) -> torch.Tensor:
    """out[i] = the sum of the rows of src whose index is i (float32 src, int64 index, CPU)."""
    return torch.ops.segops.segment_sum(src, index, size)


__all__ = ["segment_sum"]
