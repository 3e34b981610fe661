"""Typed wrappers, fake (meta) implementations and autograd for the opkiln operators."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["weighted_sum"]


def weighted_sum(a: Tensor, b: Tensor, alpha: float) -> Tensor:
    """Return ``alpha * a + (1 - alpha) * b`` in one pass.

    Shape rules: ``a`` and ``b`` must have exactly the same shape (no
    broadcasting), dtype (float32, float64, float16 or bfloat16) and device.
    Any strides are accepted; the result is contiguous with the same shape.
    Differentiable in ``a`` and ``b`` (``alpha`` is a Python float).
    """
    return torch.ops.opkiln.weighted_sum.default(a, b, float(alpha))


@torch.library.register_fake("opkiln::weighted_sum")
def _weighted_sum_fake(a: Tensor, b: Tensor, alpha: float) -> Tensor:
    torch._check(a.shape == b.shape, lambda: f"opkiln::weighted_sum: a and b must have the same shape, got "
                 f"{tuple(a.shape)} and {tuple(b.shape)}")
    torch._check(a.dtype == b.dtype, lambda: f"opkiln::weighted_sum: a is {a.dtype} but b is {b.dtype}")
    torch._check(a.device == b.device, lambda: f"opkiln::weighted_sum: a is on {a.device} but b is on {b.device}")
    return torch.empty(a.shape, dtype=a.dtype, device=a.device)


def _weighted_sum_setup(ctx, inputs, output):  # type: ignore[no-untyped-def]
    _, _, alpha = inputs
    ctx.alpha = alpha


def _weighted_sum_backward(ctx, grad):  # type: ignore[no-untyped-def]
    return grad * ctx.alpha, grad * (1.0 - ctx.alpha), None


torch.library.register_autograd(
    "opkiln::weighted_sum", _weighted_sum_backward, setup_context=_weighted_sum_setup
)
