"""Pure-PyTorch references for the opkiln operators, and shared test helpers."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

FLOAT_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]

HAS_CUDA = torch.cuda.is_available()
CUDA = pytest.param(
    "cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")]
)
DEVICES = ["cpu", CUDA]

# Tolerances for results rounded to the output dtype once (fp32 accumulation).
TOL = {
    torch.float32: {"atol": 1e-5, "rtol": 1e-5},
    torch.float64: {"atol": 1e-12, "rtol": 1e-12},
    torch.float16: {"atol": 2e-3, "rtol": 2e-3},
    torch.bfloat16: {"atol": 1.6e-2, "rtol": 1.6e-2},
}


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def weighted_sum_ref(a: Tensor, b: Tensor, alpha: float) -> Tensor:
    acc = acc_dtype(a.dtype)
    return (alpha * a.to(acc) + (1.0 - alpha) * b.to(acc)).to(a.dtype)


def rms_norm_ref(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    acc = acc_dtype(x.dtype)
    xf = x.to(acc)
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (xf * rstd * weight.to(acc)).to(x.dtype)


def rms_norm_grads_ref(x: Tensor, weight: Tensor, eps: float, grad: Tensor) -> tuple[Tensor, Tensor]:
    """(dx, dw) by autograd through the reference, computed in the accumulation dtype."""
    acc = acc_dtype(x.dtype)
    xr = x.detach().to(acc).requires_grad_(True)
    wr = weight.detach().to(acc).requires_grad_(True)
    y = xr * torch.rsqrt(xr.pow(2).mean(-1, keepdim=True) + eps) * wr
    dx, dw = torch.autograd.grad(y, (xr, wr), grad.to(acc))
    return dx.to(x.dtype), dw.to(weight.dtype)


def nms_ref(boxes: Tensor, scores: Tensor, iou_threshold: float) -> Tensor:
    """torchvision's greedy NMS, one kept box at a time, in plain PyTorch.

    IoU in float32 (float64 for float64 boxes) with torchvision's CPU operation
    order, compared with the threshold in float64; stable sort by decreasing
    score (NaN first).
    """
    acc = acc_dtype(boxes.dtype)
    b = boxes.detach().to("cpu", acc)
    s = scores.detach().to("cpu", acc)
    n = b.shape[0]
    if n == 0:
        return torch.empty(0, dtype=torch.int64)
    s = torch.where(s == 0, torch.zeros_like(s), s)  # -0.0 ties with +0.0
    order = torch.sort(s, descending=True, stable=True).indices
    b = b[order]
    x1, y1, x2, y2 = b.unbind(1)
    area = (x2 - x1) * (y2 - y1)
    removed = torch.zeros(n, dtype=torch.bool)
    keep = []
    for i in range(n):
        if removed[i]:
            continue
        keep.append(int(order[i]))
        w = (torch.minimum(x2[i], x2[i + 1:]) - torch.maximum(x1[i], x1[i + 1:])).clamp(min=0)
        h = (torch.minimum(y2[i], y2[i + 1:]) - torch.maximum(y1[i], y1[i + 1:])).clamp(min=0)
        inter = w * h
        iou = inter / (area[i] + area[i + 1:] - inter)
        removed[i + 1:] |= iou.double() > iou_threshold
    return torch.tensor(keep, dtype=torch.int64)


def random_boxes(n: int, dtype: torch.dtype = torch.float32, *, seed: int = 0, extent: float = 100.0,
                 max_size: float = 30.0) -> tuple[Tensor, Tensor]:
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g, dtype=torch.float64) * extent
    wh = torch.rand(n, 2, generator=g, dtype=torch.float64) * max_size
    boxes = torch.cat([xy, xy + wh], dim=1).to(dtype)
    scores = torch.rand(n, generator=g, dtype=torch.float64).to(dtype)
    return boxes, scores
