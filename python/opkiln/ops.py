"""Typed wrappers, fake (meta) implementations and autograd for the opkiln operators.

Operators (all in the ``torch.ops.opkiln`` namespace, schemas in ops/<op>/binding.cpp):

- ``weighted_sum(a, b, alpha)``: one fused kernel; autograd here.
- ``rms_norm(x, weight, eps)``: CompositeImplicitAutograd in C++; it calls the
  internal ``_rms_norm_forward`` (fused kernel returning ``(y, rstd)``), whose
  autograd formula here calls the fused ``_rms_norm_backward``. Both internal
  ops have fake impls, so opcheck, torch.compile and autograd all see real
  kernels. Double backward raises (the backward op's autograd formula says so).
- ``nms(boxes, scores, iou_threshold)``: not differentiable; its fake impl has a
  data-dependent output size. ``batched_nms`` is composed in Python.
- ``roi_align(input, rois, spatial_scale, pooled_height, pooled_width,
  sampling_ratio, aligned)``: torchvision's RoIAlign; autograd here calls the
  internal ``_roi_align_backward`` kernel (differentiable in ``input``, not in
  ``rois``; no double backward).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import torch
from torch import Tensor

__all__ = ["batched_nms", "nms", "rms_norm", "roi_align", "weighted_sum"]

_FLOAT_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


_F = TypeVar("_F", bound=Callable[..., Any])


def _register_fake(name: str) -> Callable[[_F], _F]:
    return cast(Callable[[_F], _F], torch.library.register_fake(name))


def _check(cond: bool, message: Callable[[], str]) -> None:
    torch._check(cond, message)  # type: ignore[no-untyped-call]


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


# ---------------------------------------------------------------------------- weighted_sum


def weighted_sum(a: Tensor, b: Tensor, alpha: float) -> Tensor:
    """Return ``alpha * a + (1 - alpha) * b`` in one pass.

    Shape rules: ``a`` and ``b`` must have exactly the same shape (no
    broadcasting), dtype (float32, float64, float16 or bfloat16) and device.
    Any strides are accepted; the result is contiguous with the same shape.
    Differentiable in ``a`` and ``b`` (``alpha`` is a Python float).
    """
    return cast(Tensor, torch.ops.opkiln.weighted_sum.default(a, b, float(alpha)))


@_register_fake("opkiln::weighted_sum")
def _weighted_sum_fake(a: Tensor, b: Tensor, alpha: float) -> Tensor:
    _check(a.shape == b.shape, lambda: f"opkiln::weighted_sum: a and b must have the same shape, got "
                 f"{tuple(a.shape)} and {tuple(b.shape)}")
    _check(a.dtype == b.dtype, lambda: f"opkiln::weighted_sum: a is {a.dtype} but b is {b.dtype}")
    _check(a.device == b.device, lambda: f"opkiln::weighted_sum: a is on {a.device} but b is on {b.device}")
    return torch.empty(a.shape, dtype=a.dtype, device=a.device)


def _weighted_sum_setup(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    _, _, alpha = inputs
    ctx.alpha = alpha


def _weighted_sum_backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor, None]:
    return grad * ctx.alpha, grad * (1.0 - ctx.alpha), None


torch.library.register_autograd(
    "opkiln::weighted_sum", _weighted_sum_backward, setup_context=_weighted_sum_setup
)


# ---------------------------------------------------------------------------- rms_norm


def rms_norm(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
    """RMSNorm over the last dimension: ``x * rsqrt(mean(x**2, -1, keepdim=True) + eps) * weight``.

    Shape rules: ``x`` has shape ``[..., C]`` (at least one dimension) and
    ``weight`` shape ``[C]``; same dtype (float32, float64, float16 or
    bfloat16) and device. Any strides are accepted; the result is contiguous
    with the shape of ``x``. Sums are accumulated in float32 (float64 for
    float64 inputs). ``eps`` must be finite and >= 0. Differentiable in ``x``
    and ``weight`` (one fused backward kernel; no double backward).
    """
    return cast(Tensor, torch.ops.opkiln.rms_norm.default(x, weight, float(eps)))


def _check_rms_norm_args(x: Tensor, weight: Tensor, op: str) -> None:
    _check(x.dim() >= 1, lambda: f"opkiln::{op}: x must have at least one dimension")
    _check(weight.dim() == 1 and weight.shape[0] == x.shape[-1],
                 lambda: f"opkiln::{op}: weight must be 1-D with x.shape[-1] elements, got {tuple(weight.shape)}")
    _check(x.dtype == weight.dtype, lambda: f"opkiln::{op}: x is {x.dtype} but weight is {weight.dtype}")
    _check(x.dtype in _FLOAT_DTYPES, lambda: f"opkiln::{op}: x must be a floating dtype, got {x.dtype}")
    _check(x.device == weight.device,
                 lambda: f"opkiln::{op}: x is on {x.device} but weight is on {weight.device}")


@_register_fake("opkiln::_rms_norm_forward")
def _rms_norm_forward_fake(x: Tensor, weight: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    _check_rms_norm_args(x, weight, "_rms_norm_forward")
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    rstd = torch.empty(x.shape[:-1], dtype=_acc_dtype(x.dtype), device=x.device)
    return y, rstd


@_register_fake("opkiln::_rms_norm_backward")
def _rms_norm_backward_fake(grad: Tensor, x: Tensor, weight: Tensor, rstd: Tensor) -> tuple[Tensor, Tensor]:
    _check_rms_norm_args(x, weight, "_rms_norm_backward")
    _check(grad.shape == x.shape, lambda: "opkiln::_rms_norm_backward: grad must have the shape of x")
    _check(rstd.shape == x.shape[:-1], lambda: "opkiln::_rms_norm_backward: rstd must have shape x.shape[:-1]")
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    dw = torch.empty(weight.shape, dtype=weight.dtype, device=weight.device)
    return dx, dw


def _rms_norm_setup(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
    x, weight, _ = inputs
    _, rstd = output
    ctx.mark_non_differentiable(rstd)
    ctx.save_for_backward(x, weight, rstd)


def _rms_norm_backward(ctx: Any, grad_y: Tensor, grad_rstd: Tensor | None) -> tuple[Tensor | None, ...]:
    x, weight, rstd = ctx.saved_tensors
    need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    if not (need_x or need_w):
        return None, None, None
    grad_x, grad_w = torch.ops.opkiln._rms_norm_backward.default(grad_y, x, weight, rstd)
    return (grad_x if need_x else None), (grad_w if need_w else None), None


torch.library.register_autograd(
    "opkiln::_rms_norm_forward", _rms_norm_backward, setup_context=_rms_norm_setup
)


def _no_setup(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
    pass


def _rms_norm_double_backward(ctx: Any, grad_dx: Tensor, grad_dw: Tensor) -> tuple[None, ...]:
    # Registered so that a second-order gradient fails loudly instead of silently
    # being treated as zero by the autograd fallback.
    raise RuntimeError("opkiln.rms_norm: double backward (a gradient of the gradient) is not supported")


torch.library.register_autograd(
    "opkiln::_rms_norm_backward", _rms_norm_double_backward, setup_context=_no_setup
)


# ---------------------------------------------------------------------------- nms


def nms(boxes: Tensor, scores: Tensor, iou_threshold: float) -> Tensor:
    """Greedy non-maximum suppression; the semantics of ``torchvision.ops.nms``.

    Shape rules: ``boxes`` is ``[N, 4]`` as ``(x1, y1, x2, y2)``, ``scores`` is
    ``[N]``; same dtype (float32, float64, float16 or bfloat16) and device; any
    strides. Returns the int64 indices of the kept boxes, by decreasing score.
    A box is suppressed when a kept box with a higher score overlaps it with
    IoU strictly greater than ``iou_threshold`` (equal does not suppress).
    Equal scores keep index order; NaN scores sort first. IoU is computed in
    float32 for 16-bit inputs (so ``nms(b, s, t) == nms(b.float(), s.float(), t)``)
    and float64 for float64. Not differentiable.
    """
    return cast(Tensor, torch.ops.opkiln.nms.default(boxes, scores, float(iou_threshold)))


@_register_fake("opkiln::nms")
def _nms_fake(boxes: Tensor, scores: Tensor, iou_threshold: float) -> Tensor:
    _check(boxes.dim() == 2 and boxes.shape[1] == 4,
                 lambda: f"opkiln::nms: boxes must have shape [N, 4], got {tuple(boxes.shape)}")
    _check(scores.dim() == 1 and scores.shape[0] == boxes.shape[0],
                 lambda: f"opkiln::nms: scores must have shape [N] with N = boxes.shape[0], got {tuple(scores.shape)}")
    _check(boxes.dtype == scores.dtype,
                 lambda: f"opkiln::nms: boxes is {boxes.dtype} but scores is {scores.dtype}")
    _check(boxes.device == scores.device,
                 lambda: f"opkiln::nms: boxes is on {boxes.device} but scores is on {scores.device}")
    kept = torch.library.get_ctx().new_dynamic_size()
    _check(kept <= boxes.shape[0], lambda: "opkiln::nms: more boxes kept than given")
    return boxes.new_empty((kept,), dtype=torch.int64)


def batched_nms(boxes: Tensor, scores: Tensor, idxs: Tensor, iou_threshold: float) -> Tensor:
    """NMS within each category: boxes with different ``idxs`` never suppress each other.

    Shape rules: as :func:`nms`, plus ``idxs``: integer ``[N]`` category ids on
    the same device. Returns kept indices by decreasing score. Uses
    torchvision's coordinate-offset trick (each category's boxes are shifted
    so categories cannot overlap), so very large coordinates lose precision as
    they do in torchvision.
    """
    if idxs.dim() != 1 or idxs.shape[0] != boxes.shape[0]:
        raise ValueError(f"opkiln.batched_nms: idxs must have shape [N] with N = boxes.shape[0] = "
                         f"{boxes.shape[0]}, got {tuple(idxs.shape)}")
    if idxs.dtype.is_floating_point or idxs.dtype.is_complex or idxs.dtype == torch.bool:
        raise TypeError(f"opkiln.batched_nms: idxs must be an integer tensor, got {idxs.dtype}")
    if boxes.numel() == 0:
        return nms(boxes, scores, iou_threshold)
    max_coordinate = boxes.max()
    offsets = idxs.to(boxes) * (max_coordinate + torch.ones_like(max_coordinate))
    return nms(boxes + offsets[:, None], scores, iou_threshold)


# ---------------------------------------------------------------------------- roi_align


def roi_align(input: Tensor, rois: Tensor, spatial_scale: float, pooled_height: int, pooled_width: int,
              sampling_ratio: int = -1, aligned: bool = False) -> Tensor:
    """RoIAlign with the semantics and argument order of ``torchvision.ops.roi_align``.

    Shape rules: ``input`` is ``[N, C, H, W]``; ``rois`` is ``[K, 5]``, each row
    ``(batch index, x1, y1, x2, y2)`` in input coordinates before ``spatial_scale``;
    same dtype (float32, float64, float16 or bfloat16) and device; any strides.
    Returns ``[K, C, pooled_height, pooled_width]``, contiguous. Each bin averages
    ``sampling_ratio`` x ``sampling_ratio`` bilinear samples (``sampling_ratio <= 0``:
    ``ceil(roi size / pooled size)`` per axis). ``aligned=True`` shifts the box by
    -0.5 pixel (the half-pixel correction). A batch index must lie in ``[0, N)``
    after truncation toward zero (ValueError otherwise). Differentiable in ``input``.
    """
    return cast(Tensor, torch.ops.opkiln.roi_align.default(input, rois, float(spatial_scale), int(pooled_height),
                                                           int(pooled_width), int(sampling_ratio), bool(aligned)))


def _check_roi_align_args(features: Tensor, rois: Tensor, pooled_height: int, pooled_width: int, op: str) -> None:
    _check(rois.dim() == 2 and rois.shape[1] == 5,
           lambda: f"opkiln::{op}: rois must have shape [K, 5] (batch index, x1, y1, x2, y2), got {tuple(rois.shape)}")
    _check(features.dtype == rois.dtype, lambda: f"opkiln::{op}: dtypes differ: {features.dtype} and {rois.dtype}")
    _check(features.dtype in _FLOAT_DTYPES, lambda: f"opkiln::{op}: must be a floating dtype, got {features.dtype}")
    _check(features.device == rois.device,
           lambda: f"opkiln::{op}: devices differ: {features.device} and {rois.device}")
    _check(pooled_height > 0 and pooled_width > 0,
           lambda: f"opkiln::{op}: pooled_height and pooled_width must be positive")


@_register_fake("opkiln::roi_align")
def _roi_align_fake(input: Tensor, rois: Tensor, spatial_scale: float, pooled_height: int, pooled_width: int,
                    sampling_ratio: int, aligned: bool) -> Tensor:
    _check_roi_align_args(input, rois, pooled_height, pooled_width, "roi_align")
    _check(input.dim() == 4, lambda: f"opkiln::roi_align: input must have shape [N, C, H, W], got {tuple(input.shape)}")
    return input.new_empty((rois.shape[0], input.shape[1], pooled_height, pooled_width))


@_register_fake("opkiln::_roi_align_backward")
def _roi_align_backward_fake(grad: Tensor, rois: Tensor, spatial_scale: float, pooled_height: int,
                             pooled_width: int, sampling_ratio: int, aligned: bool, batch: int, channels: int,
                             height: int, width: int) -> Tensor:
    _check_roi_align_args(grad, rois, pooled_height, pooled_width, "_roi_align_backward")
    _check(grad.shape == (rois.shape[0], channels, pooled_height, pooled_width),
           lambda: "opkiln::_roi_align_backward: grad must have shape [K, C, pooled_height, pooled_width]")
    return grad.new_empty((batch, channels, height, width))


def _roi_align_setup(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned = inputs
    ctx.save_for_backward(rois)
    ctx.params = (spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned)
    ctx.input_shape = tuple(input.shape)


def _roi_align_backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
    (rois,) = ctx.saved_tensors
    grad_input = None
    if ctx.needs_input_grad[0]:
        grad_input = torch.ops.opkiln._roi_align_backward.default(grad, rois, *ctx.params, *ctx.input_shape)
    return grad_input, None, None, None, None, None, None


torch.library.register_autograd("opkiln::roi_align", _roi_align_backward, setup_context=_roi_align_setup)


def _roi_align_double_backward(ctx: Any, grad: Tensor) -> tuple[None, ...]:
    # Registered so that a second-order gradient fails loudly instead of silently being zero.
    raise RuntimeError("opkiln.roi_align: double backward (a gradient of the gradient) is not supported")


torch.library.register_autograd(
    "opkiln::_roi_align_backward", _roi_align_double_backward, setup_context=_no_setup
)
