"""The reference roi_avg_pool's test gets once its math is written (tests/new_op/test_new_op.py puts this
`reference` in place of the scaffold's)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from support.ops_reference import acc_dtype


def reference(input: Tensor, rois: Tensor, output_size: tuple[int, int], spatial_scale: float, *extra: Any) -> Tensor:
    """Each bin the mean of its window of the scaled roi (ops/roi_avg_pool/roi_avg_pool.h), in acc_dtype."""
    acc = acc_dtype(input.dtype)
    x, r, scale = input.to(acc), rois.to(acc), torch.tensor(spatial_scale, dtype=acc)
    (ph_n, pw_n), (height, width) = output_size, x.shape[-2:]
    out = x.new_zeros((r.shape[0], x.shape[1], ph_n, pw_n))
    for k in range(r.shape[0]):
        y0, x0 = r[k, 2] * scale, r[k, 1] * scale
        bin_h, bin_w = (r[k, 4] * scale - y0) / ph_n, (r[k, 3] * scale - x0) / pw_n
        for ph in range(ph_n):
            h0 = int((y0 + ph * bin_h).floor().clamp(0, height))
            h1 = int((y0 + (ph + 1) * bin_h).ceil().clamp(0, height))
            for pw in range(pw_n):
                w0 = int((x0 + pw * bin_w).floor().clamp(0, width))
                w1 = int((x0 + (pw + 1) * bin_w).ceil().clamp(0, width))
                if h1 > h0 and w1 > w0:
                    out[k, :, ph, pw] = x[int(r[k, 0]), :, h0:h1, w0:w1].mean((-2, -1))
    return out.to(input.dtype)
