"""The reference roi_align_rotated's test gets once its math is written (tests/new_op/test_new_op.py puts this
`reference` in place of the scaffold's): mmcv's roi_align_rotated, written out sample by sample."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from support.ops_reference import acc_dtype


def reference(input: Tensor, rois: Tensor, output_size: tuple[int, int], spatial_scale: float, *extra: Any) -> Tensor:
    """Each bin the mean of roi_align's bilinear samples, placed in the box's frame and rotated by its angle
    (negated when clockwise) about its centre (ops/roi_align_rotated/roi_align_rotated.h), in acc_dtype."""
    sampling_ratio, aligned, clockwise = (*extra, *(-1, False, False)[len(extra):])  # the wrapper's defaults
    acc = acc_dtype(input.dtype)
    x, r = input.to(acc), rois.to(acc)
    (ph_n, pw_n), (height, width) = output_size, x.shape[-2:]
    one = torch.ones((), dtype=acc)
    offset = 0.5 if aligned else 0.0

    def bilinear(plane: Tensor, y: Tensor, xx: Tensor) -> Tensor | None:  # roi_align's rule; plane [C, H, W]
        if not (-1 <= y <= height and -1 <= xx <= width):
            return None
        y, xx = y.clamp(min=0), xx.clamp(min=0)
        y_lo, x_lo = int(y), int(xx)
        if y_lo >= height - 1:
            y_lo, y = height - 1, one * (height - 1)
        if x_lo >= width - 1:
            x_lo, xx = width - 1, one * (width - 1)
        y_hi, x_hi = min(y_lo + 1, height - 1), min(x_lo + 1, width - 1)
        ly, lx = y - y_lo, xx - x_lo
        return ((1 - ly) * (1 - lx) * plane[:, y_lo, x_lo] + (1 - ly) * lx * plane[:, y_lo, x_hi]
                + ly * (1 - lx) * plane[:, y_hi, x_lo] + ly * lx * plane[:, y_hi, x_hi])

    rows = []
    for k in range(r.shape[0]):
        b, cx, cy, w, h, angle = r[k]
        cx, cy, w, h = cx * spatial_scale - offset, cy * spatial_scale - offset, w * spatial_scale, h * spatial_scale
        theta = -angle if clockwise else angle
        cos_t, sin_t = torch.cos(theta), torch.sin(theta)
        if not aligned:
            w, h = torch.clamp(w, min=1), torch.clamp(h, min=1)
        bin_h, bin_w = h / ph_n, w / pw_n
        # (only what the test file imports: _write_the_math moves this function alone)
        grid_h = sampling_ratio if sampling_ratio > 0 else max(int(torch.ceil(bin_h)), 0)
        grid_w = sampling_ratio if sampling_ratio > 0 else max(int(torch.ceil(bin_w)), 0)
        bins = []
        for ph in range(ph_n):
            for pw in range(pw_n):
                total = x.new_zeros(x.shape[1])
                for iy in range(grid_h):
                    yy = -h / 2 + ph * bin_h + (iy + 0.5) * (bin_h / grid_h)
                    for ix in range(grid_w):
                        xx = -w / 2 + pw * bin_w + (ix + 0.5) * (bin_w / grid_w)
                        v = bilinear(x[int(b)], yy * cos_t - xx * sin_t + cy, yy * sin_t + xx * cos_t + cx)
                        total = total if v is None else total + v
                bins.append(total / max(grid_h * grid_w, 1))
        rows.append(torch.stack(bins, dim=-1).reshape(x.shape[1], ph_n, pw_n))
    out = torch.stack(rows) if rows else x.new_zeros((0, x.shape[1], ph_n, pw_n))
    return out.to(input.dtype)
