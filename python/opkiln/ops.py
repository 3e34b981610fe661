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
  sampling_ratio, aligned)``: torchvision's RoIAlign kernel; autograd here calls
  the internal ``_roi_align_backward`` kernel (differentiable in ``input``, not in
  ``rois``; no double backward).
- ``roi_pool(input, rois, spatial_scale, pooled_height, pooled_width)``: torchvision's RoIPool
  kernel, returning ``(output, argmax)``; autograd here calls the internal
  ``_roi_pool_backward`` through argmax (differentiable in ``input``; no double backward).
- ``ps_roi_align(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio)`` and
  ``ps_roi_pool(input, rois, spatial_scale, pooled_height, pooled_width)``: torchvision's
  position-sensitive kernels, returning ``(output, channel_mapping)``; autograd here calls
  ``_ps_roi_align_backward`` / ``_ps_roi_pool_backward`` (differentiable in ``input``; no double
  backward). One registration serves both (``_register_position_sensitive``).
- ``deform_conv2d(input, weight, offset, mask, bias, stride_h, stride_w, pad_h, pad_w, dilation_h,
  dilation_w, groups, offset_groups, use_mask)``: torchvision's deformable convolution; autograd here
  calls ``_deform_conv2d_backward``, which returns the gradients of input, weight, offset, mask and
  bias at once (no double backward).

The detection ops' Python API (``nms``, ``batched_nms``, ``roi_align``, ``RoIAlign``, ``roi_pool``,
``RoIPool``, ``ps_roi_align``, ``PSRoIAlign``, ``ps_roi_pool``, ``PSRoIPool``, ``deform_conv2d``,
``DeformConv2d``) takes exactly
``torchvision.ops``' signatures and input forms, so ``from opkiln import ops`` can stand in for
``from torchvision import ops`` for these names; the registered ops keep their schemas. The
functional forms are ``torch.fx.wrap``-ped, as torchvision's are: a symbolic trace of a model using
the classes shows one call per layer. Autocast (CPU and CUDA) casts as torchvision's does; quantized
tensors are refused with the dequantize workaround in the message. docs/torchvision-compat.md lists
what still differs. Errors have the same type and message in both ABI modes: RuntimeError (shapes,
dtypes, devices), ValueError (a bad value), NotImplementedError (quantized).
"""

import math
from collections.abc import Callable
from typing import Any, Optional, TypeVar, Union, cast

import torch
import torch.fx
from torch import Tensor, nn
from torch.jit.annotations import BroadcastingList2
from torch.nn.modules.utils import _pair as _conv_pair

from ._kiln import registration

__all__ = ["DeformConv2d", "PSRoIAlign", "PSRoIPool", "RoIAlign", "RoIPool", "batched_nms", "deform_conv2d", "nms",
           "ps_roi_align", "ps_roi_pool", "rms_norm", "roi_align", "roi_pool", "weighted_sum"]

_FLOAT_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


_F = TypeVar("_F", bound=Callable[..., Any])


# Every op registers through these two (kiln's generated _kiln/registration.py): torch.library's registrations
# at a cost per op that stays flat (the autograd kernel is built on first use); docs/adding-an-op.md.
_register_fake = cast(Callable[[str], Callable[[_F], _F]], registration.register_fake)
_register_autograd = cast(Callable[..., None], registration.register_autograd)


def _check(cond: bool, message: Callable[[], str]) -> None:
    torch._check(cond, message)  # type: ignore[no-untyped-call]


def _check_value(cond: bool, message: Callable[[], str]) -> None:
    # ValueError, as the kernels raise for the same value (fake and real impls agree).
    torch._check_value(cond, message)  # type: ignore[no-untyped-call]


# Python kernels of the opkiln ops (autocast, the quantized refusal); kept alive with the module.
_impl_lib = torch.library.Library("opkiln", "IMPL")  # type: ignore[no-untyped-call]

_AUTOCAST_KEYS = {"cpu": "AutocastCPU", "cuda": "AutocastCUDA"}


def _autocast_eligible(t: Tensor, device_type: str) -> bool:
    # at::autocast::cached_cast's rule, which torchvision's autocast kernels use: floating
    # tensors on the autocast device, float64 excepted, are cast.
    return t.is_floating_point() and t.device.type == device_type and t.dtype != torch.float64


def _register_autocast_cast_back(name: str) -> None:
    """torchvision's autocast kernel for ``opkiln::name`` on CPU and CUDA where the result goes back to
    the first argument's dtype (roi_align, roi_pool): eligible tensor arguments run in float32 with
    autocast off, the floating results are cast to ``args[0].dtype`` (roi_pool's int32 argmax stays
    as it is). (nms, whose result is not cast, uses torch.library.register_autocast.)"""
    op = getattr(torch.ops.opkiln, name).default
    for device_type, key in _AUTOCAST_KEYS.items():
        dispatch_key = getattr(torch._C.DispatchKey, key)

        def run(*args: Any, _device: str = device_type, _key: Any = dispatch_key) -> Any:
            cast_args = [a.float() if isinstance(a, Tensor) and _autocast_eligible(a, _device) else a for a in args]
            with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(_key)):
                result = op(*cast_args)
            if isinstance(result, tuple):
                return tuple(r.to(args[0].dtype) if r.is_floating_point() else r for r in result)
            return result.to(args[0].dtype)

        def kernel(keyset: Any, *args: Any, _run: Callable[..., Any] = run) -> Any:
            return _run(*args)

        op.py_impl(dispatch_key)(run)  # the Python dispatcher's view (torch.compile), as register_autocast does
        _impl_lib.impl(name, kernel, key, with_keyset=True)  # type: ignore[no-untyped-call]


def _refuse_quantized(name: str, workaround: str) -> None:
    def kernel(*args: Any) -> Any:
        raise NotImplementedError(
            f"opkiln::{name}: quantized tensors are not supported (torchvision's quantized kernels have no "
            f"opkiln counterpart); dequantize first: {workaround}")

    for key in ("QuantizedCPU", "QuantizedCUDA"):
        _impl_lib.impl(name, kernel, key)  # type: ignore[no-untyped-call]


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


_register_autograd(
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


_register_autograd(
    "opkiln::_rms_norm_forward", _rms_norm_backward, setup_context=_rms_norm_setup
)


def _no_setup(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
    pass


def _rms_norm_double_backward(ctx: Any, grad_dx: Tensor, grad_dw: Tensor) -> tuple[None, ...]:
    # Registered so that a second-order gradient fails loudly instead of silently
    # being treated as zero by the autograd fallback.
    raise RuntimeError("opkiln.rms_norm: double backward (a gradient of the gradient) is not supported")


_register_autograd(
    "opkiln::_rms_norm_backward", _rms_norm_double_backward, setup_context=_no_setup
)


# ---------------------------------------------------------------------------- nms

# The functions below are TorchScript-compilable, as torchvision's are: torch.jit.script
# reads "# type:" comments, so the untyped torch helpers get typed aliases here instead.
_assert = cast(Callable[[bool, str], None], torch._assert)
_is_tracing = cast(Callable[[], bool], torch.jit.is_tracing)  # type: ignore[attr-defined]


def nms(boxes: Tensor, scores: Tensor, iou_threshold: float) -> Tensor:
    """Greedy non-maximum suppression: ``torchvision.ops.nms(boxes, scores, iou_threshold)``.

    Shape rules: ``boxes`` is ``[N, 4]`` as ``(x1, y1, x2, y2)``, ``scores`` is
    ``[N]``, also when N = 0; same dtype (float32, float64, float16 or bfloat16)
    and device; any strides. Returns the int64 indices of the kept boxes, by
    decreasing score. A box is suppressed when a kept box with a higher score
    overlaps it with IoU strictly greater than ``iou_threshold`` (equal does not
    suppress). Equal scores keep index order; NaN scores sort first. IoU is
    computed in float32 for 16-bit inputs (so ``nms(b, s, t) == nms(b.float(),
    s.float(), t)``) and float64 for float64. Not differentiable.

    Under ``torch.autocast`` (CPU or CUDA) 16-bit boxes and scores are cast to
    float32 first, as torchvision does; float64 ones are not. Errors: RuntimeError
    for shapes, dtypes and devices; NotImplementedError for quantized tensors
    (torchvision has a quantized kernel: pass ``boxes.dequantize()`` and
    ``scores.dequantize()``).
    """
    out: Tensor = torch.ops.opkiln.nms(boxes, scores, iou_threshold)
    return out


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


torch.library.register_autocast("opkiln::nms", "cpu", torch.float32)
torch.library.register_autocast("opkiln::nms", "cuda", torch.float32)
_refuse_quantized("nms", "opkiln.nms(boxes.dequantize(), scores.dequantize(), iou_threshold)")


def batched_nms(boxes: Tensor, scores: Tensor, idxs: Tensor, iou_threshold: float) -> Tensor:
    """NMS within each category: ``torchvision.ops.batched_nms(boxes, scores, idxs, iou_threshold)``.

    Boxes with different ``idxs`` never suppress each other. Shape rules: as
    :func:`nms`, plus ``idxs``: ``[N]`` category ids on the same device, of any
    real dtype torchvision accepts (integer, or float: each distinct value is a
    category). Returns kept indices by decreasing score. As torchvision: when
    ``boxes.numel() == 0`` the result is an empty int64 tensor on ``boxes``' device,
    whatever the other arguments' shapes; up to 4000 box coordinates on CPU (20000
    on CUDA) it shifts each category's boxes so categories cannot overlap (very
    large coordinates lose precision there, as in torchvision), above that it runs
    :func:`nms` per category and sorts the kept boxes by score. Unlike torchvision,
    ``idxs`` of another length than ``boxes`` is a RuntimeError (torchvision
    broadcasts a length-1 ``idxs`` or fails inside the arithmetic).
    """
    if boxes.numel() == 0:
        return torch.empty((0,), dtype=torch.int64, device=boxes.device)
    if idxs.dim() != 1 or idxs.shape[0] != boxes.shape[0]:
        raise RuntimeError(f"opkiln.batched_nms: idxs must have shape [N] with N = boxes.shape[0] = "
                           f"{boxes.shape[0]}, got {list(idxs.shape)}")
    if boxes.numel() > (4000 if boxes.device.type == "cpu" else 20000) and not _is_tracing():
        return _batched_nms_per_category(boxes, scores, idxs, iou_threshold)
    return _batched_nms_coordinate_trick(boxes, scores, idxs, iou_threshold)


def _batched_nms_coordinate_trick(boxes: Tensor, scores: Tensor, idxs: Tensor, iou_threshold: float) -> Tensor:
    max_coordinate = boxes.max()
    offsets = idxs.to(boxes) * (max_coordinate + torch.tensor(1).to(boxes))
    return nms(boxes + offsets[:, None], scores, iou_threshold)


def _batched_nms_per_category(boxes: Tensor, scores: Tensor, idxs: Tensor, iou_threshold: float) -> Tensor:
    keep_mask = torch.zeros_like(scores, dtype=torch.bool)
    for class_id in torch.unique(idxs):
        members = torch.where(idxs == class_id)[0]
        kept = nms(boxes[members], scores[members], iou_threshold)
        keep_mask[members[kept]] = True
    keep_indices = torch.where(keep_mask)[0]
    return keep_indices[scores[keep_indices].sort(descending=True)[1]]


# ---------------------------------------------------------------------------- roi_align


def _pair(output_size: int | list[int] | tuple[int, int]) -> tuple[int, int]:
    # torchvision's _pair, except that a sequence must have exactly two entries (torchvision
    # raises IndexError for one and silently drops a third). A list and a tuple take separate
    # branches: TorchScript cannot index a Union of the two.
    if isinstance(output_size, list):  # noqa: SIM114
        _check_pair(len(output_size), str(output_size))
        return output_size[0], output_size[1]
    elif isinstance(output_size, tuple):
        _check_pair(len(output_size), str(output_size))
        return output_size[0], output_size[1]
    else:  # an int; anything else goes to the op as it is, whose dispatcher refuses it as torchvision's does
        return output_size, output_size


def _check_pair(length: int, text: str) -> None:
    if length != 2:
        raise ValueError("opkiln.roi_align: output_size must be an int or a pair (height, width), got " + text)


def _check_roi_boxes_shape(boxes: Tensor | list[Tensor], columns: int = 5) -> None:
    # torchvision.ops._utils.check_roi_boxes_shape: the same conditions, errors and messages, for rois of
    # `columns` values a row (torchvision's 5: batch index, x1, y1, x2, y2; a list's boxes lack the batch index).
    if isinstance(boxes, (list, tuple)):
        for tensor in boxes:
            _assert(tensor.size(1) == columns - 1, "The shape of the tensor in the boxes list is not correct as "
                    "List[Tensor[L, " + str(columns - 1) + "]]")
    elif isinstance(boxes, Tensor):
        _assert(boxes.size(1) == columns, "The boxes tensor shape is not correct as Tensor[K, " + str(columns) + "]")
    else:
        _assert(False, "boxes is expected to be a Tensor[L, " + str(columns) + "] or a List[Tensor[K, " +
                str(columns - 1) + "]]")


def _cat(tensors: list[Tensor]) -> Tensor:
    # torchvision.ops._utils._cat: one tensor is used as it is; none is torch.cat's ValueError.
    return tensors[0] if len(tensors) == 1 else torch.cat(tensors, dim=0)


def _rois(boxes: Tensor | list[Tensor], columns: int = 5) -> Tensor:
    # The [K, columns] rois of torchvision's two box forms (a [K, columns] tensor, or per image a
    # [L_i, columns - 1] tensor without the batch index), checked as torchvision checks them.
    _check_roi_boxes_shape(boxes, columns)
    if isinstance(boxes, Tensor):
        return boxes
    return _boxes_to_rois(boxes)


def _boxes_to_rois(boxes: list[Tensor]) -> Tensor:
    # torchvision.ops._utils.convert_boxes_to_roi_format: boxes[i] belong to image i.
    concat = _cat(list(boxes))
    ids = _cat([torch.full_like(b[:, :1], i) for i, b in enumerate(boxes)])
    return torch.cat([ids, concat], dim=1)


@torch.fx.wrap
def roi_align(input: Tensor, boxes: Union[Tensor, list[Tensor]],  # noqa: UP007 (torchvision's annotation)
              output_size: BroadcastingList2[int], spatial_scale: float = 1.0,
              sampling_ratio: int = -1, aligned: bool = False) -> Tensor:
    """RoIAlign: ``torchvision.ops.roi_align(input, boxes, output_size, spatial_scale, sampling_ratio, aligned)``.

    ``input`` is ``[N, C, H, W]``. ``boxes`` is either a ``[K, 5]`` tensor, each row
    ``(batch index, x1, y1, x2, y2)``, or a list (or tuple) of ``[L_i, 4]`` tensors, the
    boxes of image i; coordinates are in input pixels before ``spatial_scale``.
    ``output_size`` is an int or ``(height, width)``. Same dtype (float32, float64,
    float16 or bfloat16) and device for input and boxes; any strides. Returns
    ``[K, C, height, width]``, contiguous. Each bin averages ``sampling_ratio`` x
    ``sampling_ratio`` bilinear samples (``sampling_ratio <= 0``: ``ceil(roi size /
    output size)`` per axis); ``aligned=True`` shifts boxes by -0.5 pixel.
    Differentiable in ``input``.

    Under ``torch.autocast`` (CPU or CUDA) input and boxes run in float32 and the
    result is cast back to ``input``'s dtype, as torchvision does. Errors: boxes of the
    wrong shape fail torchvision's own assertion (AssertionError, same message);
    dtypes, devices and ``input``'s shape are RuntimeErrors. Where torchvision reads
    out of bounds, opkiln raises a ValueError naming the roi: a batch index outside
    ``[0, N)`` after truncation toward zero (NaN included). An output size of 0 gives an
    empty result, as in torchvision; a negative one is a ValueError. Quantized tensors:
    NotImplementedError (dequantize first).
    """
    rois = _rois(boxes)
    pooled_height, pooled_width = _pair(output_size)
    # Arguments go to the op as they are (a float output size is the dispatcher's error, as in torchvision).
    out: Tensor = torch.ops.opkiln.roi_align(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio,
                                             aligned)
    return out


class RoIAlign(nn.Module):
    """``torchvision.ops.RoIAlign``: :func:`roi_align` with its parameters fixed at construction."""

    def __init__(self, output_size: BroadcastingList2[int], spatial_scale: float,
                 sampling_ratio: int, aligned: bool = False):
        super().__init__()
        self.output_size = output_size
        self.spatial_scale = spatial_scale
        self.sampling_ratio = sampling_ratio
        self.aligned = aligned

    def forward(self, input: Tensor, rois: Union[Tensor, list[Tensor]]) -> Tensor:  # noqa: UP007
        return roi_align(input, rois, self.output_size, self.spatial_scale, self.sampling_ratio, self.aligned)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(output_size={self.output_size}, spatial_scale={self.spatial_scale}, "
                f"sampling_ratio={self.sampling_ratio}, aligned={self.aligned})")


def _check_roi_align_args(features: Tensor, rois: Tensor, pooled_height: int, pooled_width: int, op: str,
                          columns: int = 5, layout: str = "batch index, x1, y1, x2, y2") -> None:
    # facade/rois.h's check_rois for the fake impls; columns, layout: the op's box layout (RoiLayout).
    _check(rois.dim() == 2 and rois.shape[1] == columns,
           lambda: f"opkiln::{op}: rois must have shape [K, {columns}] ({layout}), got {tuple(rois.shape)}")
    _check(features.dtype == rois.dtype, lambda: f"opkiln::{op}: dtypes differ: {features.dtype} and {rois.dtype}")
    _check(features.dtype in _FLOAT_DTYPES, lambda: f"opkiln::{op}: must be a floating dtype, got {features.dtype}")
    _check(features.device == rois.device,
           lambda: f"opkiln::{op}: devices differ: {features.device} and {rois.device}")
    _check_value(pooled_height >= 0 and pooled_width >= 0,
                 lambda: f"opkiln::{op}: pooled_height and pooled_width must be >= 0")


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


_register_autograd("opkiln::roi_align", _roi_align_backward, setup_context=_roi_align_setup)
_register_autocast_cast_back("roi_align")
_refuse_quantized("roi_align", "opkiln.roi_align(input.dequantize(), boxes.dequantize(), ...), then "
                               "torch.quantize_per_tensor(result, input.q_scale(), input.q_zero_point(), input.dtype)")


def _roi_align_double_backward(ctx: Any, grad: Tensor) -> tuple[None, ...]:
    # Registered so that a second-order gradient fails loudly instead of silently being zero.
    raise RuntimeError("opkiln.roi_align: double backward (a gradient of the gradient) is not supported")


_register_autograd(
    "opkiln::_roi_align_backward", _roi_align_double_backward, setup_context=_no_setup
)


# ---------------------------------------------------------------------------- roi_pool


@torch.fx.wrap
def roi_pool(input: Tensor, boxes: Union[Tensor, list[Tensor]],  # noqa: UP007 (torchvision's annotation)
             output_size: BroadcastingList2[int], spatial_scale: float = 1.0) -> Tensor:
    """RoIPool: ``torchvision.ops.roi_pool(input, boxes, output_size, spatial_scale)``.

    ``input`` is ``[N, C, H, W]``; ``boxes`` a ``[K, 5]`` tensor of rows ``(batch index, x1, y1,
    x2, y2)`` or a list (or tuple) of ``[L_i, 4]`` tensors, the boxes of image i, in input pixels
    before ``spatial_scale``; ``output_size`` an int or ``(height, width)``. Same dtype (float32,
    float64, float16 or bfloat16) and device for input and boxes; any strides. Returns
    ``[K, C, height, width]``, contiguous: each bin is the largest value of its window of the
    scaled, rounded box (0 for an empty window). Differentiable in ``input`` (the gradient goes
    to the chosen element); no double backward.

    Errors as :func:`roi_align`'s: torchvision's AssertionError for boxes of the wrong shape,
    RuntimeError for dtypes, devices and ``input``'s shape, ValueError naming the roi for a batch
    index outside ``[0, N)`` (torchvision reads out of bounds), ValueError for a negative output
    size. Under ``torch.autocast`` it runs in float32 and casts back, as torchvision does.
    """
    rois = _rois(boxes)
    pooled_height, pooled_width = _pair(output_size)
    out: tuple[Tensor, Tensor] = torch.ops.opkiln.roi_pool(input, rois, spatial_scale, pooled_height, pooled_width)
    return out[0]


class RoIPool(nn.Module):
    """``torchvision.ops.RoIPool``: :func:`roi_pool` with its parameters fixed at construction."""

    def __init__(self, output_size: BroadcastingList2[int], spatial_scale: float):
        super().__init__()
        self.output_size = output_size
        self.spatial_scale = spatial_scale

    def forward(self, input: Tensor, rois: Union[Tensor, list[Tensor]]) -> Tensor:  # noqa: UP007
        return roi_pool(input, rois, self.output_size, self.spatial_scale)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(output_size={self.output_size}, spatial_scale={self.spatial_scale})"


@_register_fake("opkiln::roi_pool")
def _roi_pool_fake(input: Tensor, rois: Tensor, spatial_scale: float, pooled_height: int,
                   pooled_width: int) -> tuple[Tensor, Tensor]:
    _check_roi_align_args(input, rois, pooled_height, pooled_width, "roi_pool")
    _check(input.dim() == 4, lambda: f"opkiln::roi_pool: input must have shape [N, C, H, W], got {tuple(input.shape)}")
    shape = (rois.shape[0], input.shape[1], pooled_height, pooled_width)
    return input.new_empty(shape), input.new_empty(shape, dtype=torch.int32)


@_register_fake("opkiln::_roi_pool_backward")
def _roi_pool_backward_fake(grad: Tensor, rois: Tensor, argmax: Tensor, spatial_scale: float, pooled_height: int,
                            pooled_width: int, batch: int, channels: int, height: int, width: int) -> Tensor:
    _check_roi_align_args(grad, rois, pooled_height, pooled_width, "_roi_pool_backward")
    _check(argmax.dtype == torch.int32 and argmax.shape == grad.shape,
           lambda: "opkiln::_roi_pool_backward: argmax must be int32 of grad's shape")
    return grad.new_empty((batch, channels, height, width))


def _roi_pool_setup(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
    input, rois, spatial_scale, pooled_height, pooled_width = inputs
    ctx.save_for_backward(rois, output[1])
    ctx.mark_non_differentiable(output[1])
    ctx.params = (spatial_scale, pooled_height, pooled_width)
    ctx.input_shape = tuple(input.shape)


def _roi_pool_backward(ctx: Any, grad: Tensor, grad_argmax: Tensor | None) -> tuple[Tensor | None, ...]:
    rois, argmax = ctx.saved_tensors
    grad_input = None
    if ctx.needs_input_grad[0]:
        grad_input = torch.ops.opkiln._roi_pool_backward.default(grad, rois, argmax, *ctx.params, *ctx.input_shape)
    return grad_input, None, None, None, None


_register_autograd("opkiln::roi_pool", _roi_pool_backward, setup_context=_roi_pool_setup)
_register_autocast_cast_back("roi_pool")
_refuse_quantized("roi_pool", "opkiln.roi_pool(input.dequantize(), boxes.dequantize(), ...), then "
                              "torch.quantize_per_tensor(result, input.q_scale(), input.q_zero_point(), input.dtype)")


def _roi_pool_double_backward(ctx: Any, *grads: Tensor) -> tuple[None, ...]:
    # Registered so that a second-order gradient fails loudly instead of silently being zero.
    raise RuntimeError("opkiln.roi_pool: double backward (a gradient of the gradient) is not supported")


_register_autograd("opkiln::_roi_pool_backward", _roi_pool_double_backward, setup_context=_no_setup)


# ---------------------------------------------------------------------------- ps_roi_align, ps_roi_pool
# The position-sensitive RoI ops (ops/common/ps_roi.h): input channels C = C_out * PH * PW; output
# and channel_mapping [K, C_out, PH, PW]. One registration serves both: their schemas differ only
# in the parameters after rois (ps_roi_align adds sampling_ratio).


@torch.fx.wrap
def ps_roi_align(input: Tensor, boxes: Tensor, output_size: int, spatial_scale: float = 1.0,
                 sampling_ratio: int = -1) -> Tensor:
    """Position-sensitive RoIAlign: ``torchvision.ops.ps_roi_align(input, boxes, output_size, spatial_scale,
    sampling_ratio)``.

    ``input`` is ``[N, C, H, W]`` with C a multiple of ``height * width`` of ``output_size`` (an int or
    ``(height, width)``); ``boxes`` a ``[K, 5]`` tensor of rows ``(batch index, x1, y1, x2, y2)`` or a list
    (or tuple) of ``[L_i, 4]`` tensors, as :func:`roi_align`. Returns ``[K, C / (height * width), height,
    width]``: output channel c at bin (i, j) averages the bilinear samples of input channel
    ``(c * height + i) * width + j`` (boxes shifted by -0.5 pixel, as ``aligned=True``). As torchvision, the
    sample count a bin divides by is not clamped: with ``sampling_ratio <= 0`` a box of zero width or
    height gives NaN. Differentiable in ``input``; no double backward.

    Differences from torchvision: float16/bfloat16 compute in float32 (torchvision's CPU kernel computes
    in float16, and refuses bfloat16); an output size of 0 is a ValueError (torchvision divides by zero,
    and the process dies); a batch index outside ``[0, N)`` is a ValueError naming the roi (torchvision
    reads out of bounds). Errors otherwise as :func:`roi_align`'s; autocast as torchvision's.
    """
    rois = _rois(boxes)
    pooled_height, pooled_width = _pair(output_size)
    out: tuple[Tensor, Tensor] = torch.ops.opkiln.ps_roi_align(input, rois, spatial_scale, pooled_height,
                                                               pooled_width, sampling_ratio)
    return out[0]


class PSRoIAlign(nn.Module):
    """``torchvision.ops.PSRoIAlign``: :func:`ps_roi_align` with its parameters fixed at construction."""

    def __init__(self, output_size: int, spatial_scale: float, sampling_ratio: int):
        super().__init__()
        self.output_size = output_size
        self.spatial_scale = spatial_scale
        self.sampling_ratio = sampling_ratio

    def forward(self, input: Tensor, rois: Tensor) -> Tensor:
        return ps_roi_align(input, rois, self.output_size, self.spatial_scale, self.sampling_ratio)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(output_size={self.output_size}, spatial_scale={self.spatial_scale}, "
                f"sampling_ratio={self.sampling_ratio})")


@torch.fx.wrap
def ps_roi_pool(input: Tensor, boxes: Tensor, output_size: int, spatial_scale: float = 1.0) -> Tensor:
    """Position-sensitive RoIPool: ``torchvision.ops.ps_roi_pool(input, boxes, output_size, spatial_scale)``.

    Shapes and input forms as :func:`ps_roi_align`. Output channel c at bin (i, j) is the mean of input
    channel ``(c * height + i) * width + j`` over the bin's window of the rounded, scaled box (0 for an
    empty window). As torchvision, the forward clips windows to ``[0, H - 1]`` and ``[0, W - 1]`` and the
    backward to ``[0, H]`` and ``[0, W]``. Differentiable in ``input``; no double backward. Differences
    from torchvision as :func:`ps_roi_align`'s (torchvision's CPU kernel refuses float16 and bfloat16).
    """
    rois = _rois(boxes)
    pooled_height, pooled_width = _pair(output_size)
    out: tuple[Tensor, Tensor] = torch.ops.opkiln.ps_roi_pool(input, rois, spatial_scale, pooled_height,
                                                              pooled_width)
    return out[0]


class PSRoIPool(nn.Module):
    """``torchvision.ops.PSRoIPool``: :func:`ps_roi_pool` with its parameters fixed at construction."""

    def __init__(self, output_size: int, spatial_scale: float):
        super().__init__()
        self.output_size = output_size
        self.spatial_scale = spatial_scale

    def forward(self, input: Tensor, rois: Tensor) -> Tensor:
        return ps_roi_pool(input, rois, self.output_size, self.spatial_scale)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(output_size={self.output_size}, spatial_scale={self.spatial_scale})"


def _ps_roi_shape(features: Tensor, rois: Tensor, channels: int, pooled_height: int, pooled_width: int,
                  op: str) -> tuple[int, int, int, int]:
    """The fake impls' version of facade/ps_roi.h's checks: [K, C / (PH * PW), PH, PW]."""
    _check_roi_align_args(features, rois, pooled_height, pooled_width, op)
    _check_value(pooled_height > 0 and pooled_width > 0,
                 lambda: f"opkiln::{op}: pooled_height and pooled_width must be positive")
    bins = pooled_height * pooled_width
    _check(channels % bins == 0,
           lambda: f"opkiln::{op}: input channels ({channels}) must be a multiple of pooled_height * pooled_width")
    return rois.shape[0], channels // bins, pooled_height, pooled_width


def _register_position_sensitive(name: str) -> None:
    """Fake impls, autograd (through ``_<name>_backward``), autocast and the quantized refusal of
    ``opkiln::<name>``, whose schema is (input, rois, spatial_scale, pooled_height, pooled_width, *rest)
    -> (output, channel_mapping) and whose backward's is (grad, rois, channel_mapping, <the forward's
    parameters>, batch_size, channels, height, width)."""
    backward_name = f"_{name}_backward"

    def forward_fake(input: Tensor, rois: Tensor, *params: Any) -> tuple[Tensor, Tensor]:
        _check(input.dim() == 4, lambda: f"opkiln::{name}: input must have shape [N, C, H, W], got "
                                         f"{tuple(input.shape)}")
        shape = _ps_roi_shape(input, rois, input.shape[1], params[1], params[2], name)
        return input.new_empty(shape), input.new_empty(shape, dtype=torch.int32)

    def backward_fake(grad: Tensor, rois: Tensor, channel_mapping: Tensor, *params: Any) -> Tensor:
        batch, channels, height, width = params[-4:]
        shape = _ps_roi_shape(grad, rois, channels, params[1], params[2], backward_name)
        _check(tuple(grad.shape) == shape, lambda: f"opkiln::{backward_name}: grad must have shape {shape}")
        _check(channel_mapping.dtype == torch.int32 and tuple(channel_mapping.shape) == shape,
               lambda: f"opkiln::{backward_name}: channel_mapping must be int32 of grad's shape")
        return grad.new_empty((batch, channels, height, width))

    def setup(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
        ctx.save_for_backward(inputs[1], output[1])
        ctx.mark_non_differentiable(output[1])
        ctx.params = inputs[2:]
        ctx.input_shape = tuple(inputs[0].shape)

    def backward(ctx: Any, grad: Tensor, grad_mapping: Tensor | None) -> tuple[Tensor | None, ...]:
        rois, channel_mapping = ctx.saved_tensors
        grad_input = None
        if ctx.needs_input_grad[0]:
            grad_input = getattr(torch.ops.opkiln, backward_name).default(grad, rois, channel_mapping, *ctx.params,
                                                                          *ctx.input_shape)
        return (grad_input, *([None] * (1 + len(ctx.params))))

    def double_backward(ctx: Any, grad: Tensor) -> tuple[None, ...]:
        raise RuntimeError(f"opkiln.{name}: double backward (a gradient of the gradient) is not supported")

    _register_fake(f"opkiln::{name}")(forward_fake)
    _register_fake(f"opkiln::{backward_name}")(backward_fake)
    _register_autograd(f"opkiln::{name}", backward, setup_context=setup)
    _register_autograd(f"opkiln::{backward_name}", double_backward, setup_context=_no_setup)
    _register_autocast_cast_back(name)
    _refuse_quantized(name, f"opkiln.{name}(input.dequantize(), boxes.dequantize(), ...)")


_register_position_sensitive("ps_roi_align")
_register_position_sensitive("ps_roi_pool")


# ---------------------------------------------------------------------------- deform_conv2d
# torchvision's deformable convolution (ops/deform_conv2d/deform_conv2d.h). The op's schema is
# torchvision's: (input, weight, offset, mask, bias, stride_h, stride_w, pad_h, pad_w, dilation_h,
# dilation_w, groups, offset_groups, use_mask); its backward returns the five gradients at once.


@torch.fx.wrap
def deform_conv2d(input: Tensor, offset: Tensor, weight: Tensor,
                  bias: Optional[Tensor] = None,  # noqa: UP045 (torchvision's annotation)
                  stride: tuple[int, int] = (1, 1), padding: tuple[int, int] = (0, 0),
                  dilation: tuple[int, int] = (1, 1),
                  mask: Optional[Tensor] = None) -> Tensor:  # noqa: UP045
    """Deformable convolution: ``torchvision.ops.deform_conv2d(input, offset, weight, bias, stride, padding,
    dilation, mask)`` (DCN v2 with ``mask``, DCN v1 without).

    ``input`` is ``[N, C, H, W]``, ``weight`` ``[C_out, C / groups, KH, KW]`` (groups = C / weight.shape[1]),
    ``offset`` ``[N, 2 * offset_groups * KH * KW, OH, OW]`` (offset_groups from its shape), ``mask``
    ``[N, offset_groups * KH * KW, OH, OW]`` or None, ``bias`` ``[C_out]`` or None; stride, padding and
    dilation are ints or pairs. Tap (i, j) of output (oh, ow) samples input bilinearly (zero outside) at
    ``(oh * stride_h - pad_h + i * dilation_h + dy, ow * stride_w - pad_w + j * dilation_w + dx)``,
    (dy, dx) its offset pair, times its mask. Returns ``[N, C_out, OH, OW]``. float32, float64, float16
    or bfloat16, all on one device; any strides. Differentiable in input, offset, mask, weight and bias.
    Under ``torch.autocast`` (CPU or CUDA) it runs in float32 and the result takes ``input``'s dtype,
    as torchvision's does. Errors: RuntimeError for shapes (torchvision's messages), dtypes and devices.
    """
    out_channels = weight.shape[0]
    use_mask = mask is not None
    if mask is None:
        mask = torch.zeros((input.shape[0], 0), device=input.device, dtype=input.dtype)
    if bias is None:
        bias = torch.zeros(out_channels, device=input.device, dtype=input.dtype)
    stride_h, stride_w = _conv_pair(stride)
    pad_h, pad_w = _conv_pair(padding)
    dil_h, dil_w = _conv_pair(dilation)
    weights_h, weights_w = weight.shape[-2:]
    _, n_in_channels, _, _ = input.shape
    n_offset_grps = offset.shape[1] // (2 * weights_h * weights_w)
    n_weight_grps = n_in_channels // weight.shape[1]
    if n_offset_grps == 0:
        raise RuntimeError(
            "the shape of the offset tensor at dimension 1 is not valid. It should "
            "be a multiple of 2 * weight.size[2] * weight.size[3].\n"
            f"Got offset.shape[1]={offset.shape[1]}, while 2 * weight.size[2] * weight.size[3]="
            f"{2 * weights_h * weights_w}")
    out: Tensor = torch.ops.opkiln.deform_conv2d(input, weight, offset, mask, bias, stride_h, stride_w, pad_h, pad_w,
                                                 dil_h, dil_w, n_weight_grps, n_offset_grps, use_mask)
    return out


class DeformConv2d(nn.Module):
    """``torchvision.ops.DeformConv2d``: a convolution layer whose forward is :func:`deform_conv2d`."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding: int = 0,
                 dilation: int = 1, groups: int = 1, bias: bool = True):
        super().__init__()
        if in_channels % groups != 0:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups != 0:
            raise ValueError("out_channels must be divisible by groups")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = _conv_pair(kernel_size)
        self.stride = _conv_pair(stride)
        self.padding = _conv_pair(padding)
        self.dilation = _conv_pair(dilation)
        self.groups = groups
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels // groups, self.kernel_size[0],
                                               self.kernel_size[1]))
        self.bias: Optional[nn.Parameter]  # noqa: UP045
        if bias:
            self.bias = nn.Parameter(torch.empty(out_channels))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = nn.init._calculate_fan_in_and_fan_out(self.weight)
            bound = 1 / math.sqrt(fan_in)
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, input: Tensor, offset: Tensor, mask: Optional[Tensor] = None) -> Tensor:  # noqa: UP045
        return deform_conv2d(input, offset, self.weight, self.bias, stride=self.stride, padding=self.padding,
                             dilation=self.dilation, mask=mask)

    def __repr__(self) -> str:
        s = (f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        s += f", padding={self.padding}" if self.padding != (0, 0) else ""
        s += f", dilation={self.dilation}" if self.dilation != (1, 1) else ""
        s += f", groups={self.groups}" if self.groups != 1 else ""
        s += ", bias=False" if self.bias is None else ""
        return s + ")"


def _deform_conv2d_shape(input: Tensor, weight: Tensor, offset: Tensor, mask: Tensor, bias: Tensor,
                         params: tuple[int, ...], use_mask: bool, op: str) -> tuple[int, int, int, int]:
    """The fake impls' version of the binding's checks: the output's shape [N, C_out, OH, OW]."""
    stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups, offset_groups = params
    def differs(name: str, mine: object, theirs: object) -> Callable[[], str]:
        return lambda: f"opkiln::{op}: input is {mine} but {name} is {theirs}"

    others = (("weight", weight), ("offset", offset), ("mask", mask), ("bias", bias))
    for name, t in others:  # devices, shapes, then dtypes: the kernel's (and torchvision's) order
        _check(t.device == input.device, differs(name, f"on {input.device}", f"on {t.device}"))
    _check(input.dim() == 4 and weight.dim() == 4 and offset.dim() == 4 and (not use_mask or mask.dim() == 4),
           lambda: f"opkiln::{op}: input, weight, offset (and mask) must have 4 dimensions")
    kh, kw = weight.shape[2], weight.shape[3]
    _check(kh > 0 and kw > 0 and stride_h > 0 and stride_w > 0 and pad_h >= 0 and pad_w >= 0 and dil_h > 0
           and dil_w > 0 and groups > 0 and offset_groups > 0,
           lambda: f"opkiln::{op}: kernel, strides, dilations and groups must be positive, padding >= 0")
    _check(weight.shape[1] * groups == input.shape[1] and weight.shape[0] % groups == 0,
           lambda: f"opkiln::{op}: weight's shape {tuple(weight.shape)} does not fit groups={groups}")
    _check(offset.shape[1] == offset_groups * 2 * kh * kw, lambda: f"opkiln::{op}: offset.shape[1] is not valid")
    _check(not use_mask or mask.shape[1] == offset_groups * kh * kw,
           lambda: f"opkiln::{op}: mask.shape[1] is not valid")
    _check(input.shape[1] % offset_groups == 0 and offset.shape[0] == input.shape[0]
           and (not use_mask or mask.shape[0] == input.shape[0]),
           lambda: f"opkiln::{op}: offset groups or batch sizes do not fit the input")
    _check(bias.dim() == 1 and bias.shape[0] == weight.shape[0], lambda: f"opkiln::{op}: bias must have shape [C_out]")
    out_h = (input.shape[2] + 2 * pad_h - (dil_h * (kh - 1) + 1)) // stride_h + 1
    out_w = (input.shape[3] + 2 * pad_w - (dil_w * (kw - 1) + 1)) // stride_w + 1
    _check(offset.shape[2] == out_h and offset.shape[3] == out_w
           and (not use_mask or (mask.shape[2] == out_h and mask.shape[3] == out_w)),
           lambda: f"opkiln::{op}: offset (and mask) output dims differ from ({out_h}, {out_w})")
    _check(out_h > 0 and out_w > 0, lambda: f"opkiln::{op}: Calculated output size too small")
    for name, t in others:
        _check(t.dtype == input.dtype, differs(name, input.dtype, t.dtype))
    _check(input.dtype in _FLOAT_DTYPES, lambda: f"opkiln::{op}: input must be a floating dtype, got {input.dtype}")
    return input.shape[0], weight.shape[0], out_h, out_w


@_register_fake("opkiln::deform_conv2d")
def _deform_conv2d_fake(input: Tensor, weight: Tensor, offset: Tensor, mask: Tensor, bias: Tensor, *params: Any
                        ) -> Tensor:
    use_mask = params[-1]
    return input.new_empty(_deform_conv2d_shape(input, weight, offset, mask, bias, params[:-1], use_mask,
                                                "deform_conv2d"))


@_register_fake("opkiln::_deform_conv2d_backward")
def _deform_conv2d_backward_fake(grad: Tensor, input: Tensor, weight: Tensor, offset: Tensor, mask: Tensor,
                                 bias: Tensor, *params: Any) -> tuple[Tensor, ...]:
    shape = _deform_conv2d_shape(input, weight, offset, mask, bias, params[:-1], params[-1], "_deform_conv2d_backward")
    _check(tuple(grad.shape) == shape and grad.dtype == input.dtype,
           lambda: f"opkiln::_deform_conv2d_backward: grad must have shape {shape} and input's dtype")
    return (input.new_empty(input.shape), input.new_empty(weight.shape), input.new_empty(offset.shape),
            input.new_empty(mask.shape), input.new_empty(bias.shape))


def _deform_conv2d_setup(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    ctx.save_for_backward(*inputs[:5])
    ctx.params = inputs[5:]


def _deform_conv2d_backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
    input, weight, offset, mask, bias = ctx.saved_tensors
    grads = torch.ops.opkiln._deform_conv2d_backward.default(grad, input, weight, offset, mask, bias, *ctx.params)
    grad_input, grad_weight, grad_offset, grad_mask, grad_bias = grads
    wanted = ctx.needs_input_grad
    return (grad_input if wanted[0] else None, grad_weight if wanted[1] else None,
            grad_offset if wanted[2] else None, grad_mask if wanted[3] else None, grad_bias if wanted[4] else None,
            *([None] * len(ctx.params)))


def _deform_conv2d_double_backward(ctx: Any, *grads: Tensor) -> tuple[None, ...]:
    raise RuntimeError("opkiln.deform_conv2d: double backward (a gradient of the gradient) is not supported")


_register_autograd("opkiln::deform_conv2d", _deform_conv2d_backward, setup_context=_deform_conv2d_setup)
_register_autograd("opkiln::_deform_conv2d_backward", _deform_conv2d_double_backward,
                   setup_context=_no_setup)
_register_autocast_cast_back("deform_conv2d")
