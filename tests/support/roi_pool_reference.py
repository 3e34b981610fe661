"""Pure-PyTorch reference for roi_pool with torchvision's semantics (ops/roi_pool/roi_pool.h).

One roi and one bin at a time (small inputs only). The roi's scaled corners, its bin sizes and
its bin edges are computed in the input's dtype, as torchvision's kernels compute them in
scalar_t (a float16 product is a float32 product rounded to float16); the window's largest
value is exact in any dtype. The backward adds each bin's gradient at its argmax in float64.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

FLT_MAX = 3.4028234663852886e38


def _round_half_away(v: float) -> int:
    return math.floor(abs(v) + 0.5) * (1 if v >= 0 else -1)


def roi_pool_ref(input: Tensor, rois: Tensor, spatial_scale: float, pooled_height: int,
                 pooled_width: int) -> tuple[Tensor, Tensor]:
    """(output, argmax) of torchvision.ops.roi_pool's kernel for [K, 5] rois with valid batch indices."""
    dtype = input.dtype
    x = input.detach().cpu()
    r = rois.detach().cpu().to(dtype)
    n, c, h, w = x.shape
    k = r.shape[0]
    out = torch.zeros(k, c, pooled_height, pooled_width, dtype=dtype)
    argmax = torch.full((k, c, pooled_height, pooled_width), -1, dtype=torch.int32)
    scale = torch.tensor(spatial_scale, dtype=dtype)
    lowest = float(torch.tensor(-FLT_MAX, dtype=dtype))

    def in_dtype(v: float) -> float:
        return float(torch.tensor(v, dtype=dtype))

    for i in range(k):
        b = int(r[i, 0].double().trunc())
        if not 0 <= b < n:
            raise ValueError(f"rois[{i}, 0] = {float(r[i, 0])} is not a batch index in [0, {n})")
        x1, y1, x2, y2 = (_round_half_away(float(v * scale)) for v in r[i, 1:])
        bin_h = in_dtype(max(y2 - y1 + 1, 1) / pooled_height)
        bin_w = in_dtype(max(x2 - x1 + 1, 1) / pooled_width)
        for ph in range(pooled_height):
            hs = min(max(math.floor(in_dtype(ph * bin_h)) + y1, 0), h)
            he = min(max(math.ceil(in_dtype((ph + 1) * bin_h)) + y1, 0), h)
            for pw in range(pooled_width):
                ws = min(max(math.floor(in_dtype(pw * bin_w)) + x1, 0), w)
                we = min(max(math.ceil(in_dtype((pw + 1) * bin_w)) + x1, 0), w)
                if he <= hs or we <= ws:
                    continue
                window = x[b, :, hs:he, ws:we].double().reshape(c, -1)
                rows = torch.arange(hs, he).view(-1, 1).expand(he - hs, we - ws)
                cols = torch.arange(ws, we).view(1, -1).expand(he - hs, we - ws)
                index = (rows * w + cols).reshape(-1)
                usable = window > lowest  # False for NaN
                masked = torch.where(usable, window, torch.full_like(window, -math.inf))
                best = masked.max(dim=1).values
                first = (masked == best.view(-1, 1)).to(torch.int8).argmax(dim=1)
                found = usable.any(dim=1)
                out[i, :, ph, pw] = torch.where(found, best, torch.full_like(best, lowest)).to(dtype)
                argmax[i, :, ph, pw] = torch.where(found, index[first], torch.full_like(first, -1)).to(torch.int32)
    return out.to(input.device), argmax.to(input.device)


def roi_pool_backward_ref(grad: Tensor, rois: Tensor, argmax: Tensor, input_shape: tuple[int, ...]) -> Tensor:
    """grad_input: each bin's gradient added at its argmax of its roi's image, in float64."""
    n, c, h, w = input_shape
    batch = rois.detach().cpu().double()[:, 0].trunc().long()
    g = grad.detach().cpu().double()
    a = argmax.detach().cpu().long()
    out = torch.zeros(n, c, h * w, dtype=torch.float64)
    for i in range(g.shape[0]):
        for ch in range(c):
            chosen = a[i, ch].reshape(-1)
            keep = chosen >= 0
            out[batch[i], ch].index_add_(0, chosen[keep], g[i, ch].reshape(-1)[keep])
    return out.view(n, c, h, w).to(grad.dtype).to(grad.device)
