"""Pure-PyTorch reference for roi_align with torchvision's semantics.

The bilinear sampling of RoIAlign is separable: a sample at (y, x) reads rows
{y_lo, y_hi} with weights {1 - ly, ly} and columns {x_lo, x_hi} with weights
{1 - lx, lx}, and it counts only when -1 <= y <= H and -1 <= x <= W, a product
of a row and a column condition. So one roi's output for every channel is
``Ay @ input[b, c] @ Ax.T / count``, where ``Ay[ph, h]`` sums the row weights of
the samples of pooled row ph (``Ax`` likewise). All rois are built at once (their
sample grids padded to the largest, the padding masked out). The products are plain
differentiable tensor operations, so autograd gives the reference gradient with
respect to input. Arithmetic is in float32 for 16-bit and float32 inputs and in
float64 for float64 inputs, as the kernels do; the result is rounded once.
"""

from __future__ import annotations

import torch
from torch import Tensor

from support.ops_reference import acc_dtype


def _axis_weights(start: Tensor, bin_size: Tensor, grid: Tensor, pooled: int, size: int) -> Tensor:
    """[K, pooled, size]: entry (k, p, i) sums the interpolation weights that the grid
    samples of roi k's pooled cell p put on row (or column) i. start, bin_size: [K] in the
    accumulation dtype; grid: [K] samples per cell (0: none)."""
    num_rois, dtype, device = start.shape[0], start.dtype, start.device
    matrix = torch.zeros(num_rois, pooled, size, dtype=dtype, device=device)
    most = int(grid.max()) if num_rois else 0
    if most == 0 or size == 0:
        return matrix
    p = torch.arange(pooled, dtype=dtype, device=device).view(1, -1, 1)
    g = torch.arange(most, device=device).view(1, 1, -1)
    start, bin_size = start.view(-1, 1, 1), bin_size.view(-1, 1, 1)
    step = bin_size / grid.clamp(min=1).to(dtype).view(-1, 1, 1)
    coord = start + p * bin_size + (g.to(dtype) + 0.5) * step  # [K, pooled, most]
    valid = (coord >= -1) & (coord <= size) & (g < grid.view(-1, 1, 1))  # False for NaN
    coord = torch.where(valid, coord, torch.zeros_like(coord)).clamp(min=0)
    lo = coord.floor().clamp(max=size - 1).long()
    at_edge = lo >= size - 1
    hi = torch.where(at_edge, lo, lo + 1)
    coord = torch.where(at_edge, lo.to(dtype), coord)
    frac = coord - lo.to(dtype)
    weight = valid.to(dtype)
    matrix.scatter_add_(2, lo, (1 - frac) * weight)
    matrix.scatter_add_(2, hi, frac * weight)
    return matrix


def _grid(bin_size: Tensor, sampling_ratio: int) -> Tensor:
    if sampling_ratio > 0:
        return torch.full(bin_size.shape, sampling_ratio, dtype=torch.int64, device=bin_size.device)
    n = bin_size.ceil()
    usable = (n > 0) & (n <= 2**31 - 1)  # NaN, infinite, absurd: no samples (as the kernels)
    return torch.where(usable, n, torch.zeros_like(n)).long()


def roi_align_ref(input: Tensor, rois: Tensor, spatial_scale: float, pooled_height: int, pooled_width: int,
                  sampling_ratio: int, aligned: bool, chunk: int = 64) -> Tensor:
    """torchvision.ops.roi_align(input, rois, (pooled_height, pooled_width), spatial_scale,
    sampling_ratio, aligned) for rois of shape [K, 5] with valid batch indices; `chunk`
    rois at a time (each gathers its image: chunk * C * H * W values)."""
    acc = acc_dtype(input.dtype)
    x = input.to(acc)
    r = rois.detach().to(input.device, acc)
    n, c, h, w = x.shape
    batch = r[:, 0].trunc().long()  # as torchvision's cast
    bad = ((batch < 0) | (batch >= n)).nonzero()
    if bad.numel():
        k = int(bad[0, 0])
        raise ValueError(f"rois[{k}, 0] = {float(r[k, 0])} is not a batch index in [0, {n})")
    corners = r[:, 1:] * spatial_scale - (0.5 if aligned else 0.0)
    x1, y1, x2, y2 = corners.unbind(1)
    roi_w, roi_h = x2 - x1, y2 - y1
    if not aligned:
        roi_w, roi_h = roi_w.clamp(min=1), roi_h.clamp(min=1)
    bin_h, bin_w = roi_h / pooled_height, roi_w / pooled_width
    grid_h, grid_w = _grid(bin_h, sampling_ratio), _grid(bin_w, sampling_ratio)
    count = (grid_h * grid_w).clamp(min=1).to(acc).view(-1, 1, 1, 1)
    ay = _axis_weights(y1, bin_h, grid_h, pooled_height, h)
    ax = _axis_weights(x1, bin_w, grid_w, pooled_width, w)
    outputs = [x.new_zeros(0, c, pooled_height, pooled_width)]
    for lo in range(0, r.shape[0], chunk):
        sl = slice(lo, lo + chunk)
        # [k, 1, p, h] @ [k, c, h, w] @ [k, 1, w, q] -> [k, c, p, q]
        outputs.append(ay[sl].unsqueeze(1) @ x[batch[sl]] @ ax[sl].transpose(1, 2).unsqueeze(1) / count[sl])
    return torch.cat(outputs).to(input.dtype)


def random_rois(num_rois: int, batch: int, height: int, width: int, dtype: torch.dtype = torch.float32,
                seed: int = 0, spatial_scale: float = 1.0) -> Tensor:
    """[K, 5] rois with valid batch indices, corners in input coordinates (before
    spatial_scale) spread a little past the feature map, and some tiny and inverted boxes."""
    g = torch.Generator().manual_seed(seed)
    batch_idx = torch.randint(0, max(batch, 1), (num_rois, 1), generator=g).double()
    extent = torch.tensor([width, height], dtype=torch.float64) / spatial_scale
    xy1 = (torch.rand(num_rois, 2, generator=g, dtype=torch.float64) * 1.2 - 0.1) * extent
    size = torch.rand(num_rois, 2, generator=g, dtype=torch.float64) * 0.8 * extent
    xy2 = xy1 + size
    flip = torch.rand(num_rois, generator=g) < 0.1  # inverted boxes: empty when aligned, clamped when not
    xy2[flip] = xy1[flip] - size[flip] * 0.1
    return torch.cat([batch_idx, xy1, xy2], 1).to(dtype)
