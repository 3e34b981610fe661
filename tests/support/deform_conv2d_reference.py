"""A pure-PyTorch deform_conv2d (torchvision's semantics), differentiable through autograd: the
reference for opkiln.deform_conv2d's forward and its five gradients."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.nn.modules.utils import _pair


def deform_conv2d_ref(x: Tensor, offset: Tensor, weight: Tensor, bias: Tensor | None = None,
                      stride: int | tuple[int, int] = 1, padding: int | tuple[int, int] = 0,
                      dilation: int | tuple[int, int] = 1, mask: Tensor | None = None) -> Tensor:
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride), _pair(padding), _pair(dilation)
    n, c, h, w = x.shape
    c_out, c_g, kh, kw = weight.shape
    groups, taps = c // c_g, kh * kw
    og = offset.shape[1] // (2 * taps)
    oh = (h + 2 * ph - (dh * (kh - 1) + 1)) // sh + 1
    ow = (w + 2 * pw - (dw * (kw - 1) + 1)) // sw + 1
    dev, dt = x.device, x.dtype
    base_y = (torch.arange(oh, device=dev) * sh - ph)[None, :, None] \
        + (torch.arange(kh, device=dev) * dh).repeat_interleave(kw)[:, None, None]
    base_x = (torch.arange(ow, device=dev) * sw - pw)[None, None, :] \
        + (torch.arange(kw, device=dev) * dw).repeat(kh)[:, None, None]
    off = offset.reshape(n, og, taps, 2, oh, ow)
    y = base_y.to(dt) + off[:, :, :, 0]  # [n, og, taps, oh, ow]
    xx = base_x.to(dt) + off[:, :, :, 1]
    inside = (y > -1) & (y < h) & (xx > -1) & (xx < w)
    y0, x0 = torch.floor(y), torch.floor(xx)
    ly, lx = y - y0, xx - x0
    planes = x.reshape(n, og, c // og, h * w)
    cols = torch.zeros(n, og, c // og, taps, oh, ow, device=dev, dtype=dt)
    for dy, dx, wt in ((0, 0, (1 - ly) * (1 - lx)), (0, 1, (1 - ly) * lx), (1, 0, ly * (1 - lx)), (1, 1, ly * lx)):
        yy, xc = y0 + dy, x0 + dx
        ok = inside & (yy >= 0) & (yy < h) & (xc >= 0) & (xc < w)
        idx = (yy.clamp(0, h - 1) * w + xc.clamp(0, w - 1)).long().reshape(n, og, 1, taps * oh * ow)
        taken = torch.gather(planes, 3, idx.expand(n, og, c // og, idx.shape[-1]))
        cols = cols + taken.reshape(n, og, c // og, taps, oh, ow) * torch.where(ok, wt, 0)[:, :, None]
    if mask is not None:
        cols = cols * mask.reshape(n, og, 1, taps, oh, ow)
    cols = cols.reshape(n, groups, c_g * taps, oh * ow)
    out = torch.einsum("gok,ngkl->ngol", weight.reshape(groups, c_out // groups, c_g * taps), cols)
    out = out.reshape(n, c_out, oh, ow)
    return out if bias is None else out + bias.reshape(1, c_out, 1, 1)


def random_args(n: int, c: int, h: int, w: int, c_out: int, kernel: tuple[int, int], groups: int, offset_groups: int,
                stride: Any, padding: Any, dilation: Any, dtype: torch.dtype = torch.float64, device: str = "cpu",
          seed: int = 0, spread: float = 2.0) -> dict[str, Any]:
    """Random inputs of one configuration; offsets of `spread` pixels reach beyond the plane."""
    gen = torch.Generator().manual_seed(seed)
    (sh, sw), (ph, pw), (dh, dw) = (torch.nn.modules.utils._pair(v) for v in (stride, padding, dilation))
    kh, kw = kernel
    oh = (h + 2 * ph - (dh * (kh - 1) + 1)) // sh + 1
    ow = (w + 2 * pw - (dw * (kw - 1) + 1)) // sw + 1

    def rand(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale).to(dtype).to(device)

    return {"input": rand(n, c, h, w), "offset": rand(n, 2 * offset_groups * kh * kw, oh, ow, scale=spread),
            "weight": rand(c_out, c // groups, kh, kw), "bias": rand(c_out),
            "mask": rand(n, offset_groups * kh * kw, oh, ow).sigmoid(), "stride": stride, "padding": padding,
            "dilation": dilation}


# (n, c, h, w, c_out, kernel, groups, offset_groups, stride, padding, dilation)
CASES = [
    (2, 6, 5, 4, 2, (3, 2), 2, 3, (2, 1), (1, 0), (2, 1)),  # torchvision's own test case
    (1, 4, 7, 6, 6, (3, 3), 1, 1, 1, 1, 1),
    (2, 4, 6, 8, 4, (1, 1), 2, 2, 1, 0, 1),
    (1, 8, 9, 7, 4, (3, 3), 4, 2, 2, (2, 1), (1, 2)),
]


def _random_grads(out: torch.Tensor, tensors: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(7), dtype=out.dtype).to(out.device)
    return torch.autograd.grad(out, tensors, grad)


def run_with_grads(f: Any, a: dict[str, Any], use_mask: bool,
                   use_bias: bool) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
    leaves = {k: a[k].detach().clone().requires_grad_(True) for k in ("input", "offset", "weight", "bias", "mask")}
    bias = leaves["bias"] if use_bias else None
    mask = leaves["mask"] if use_mask else None
    out = f(leaves["input"], leaves["offset"], leaves["weight"], bias, stride=a["stride"], padding=a["padding"],
            dilation=a["dilation"], mask=mask)
    wanted = [leaves[k] for k in ("input", "offset", "weight")] + ([bias] if use_bias else []) \
        + ([mask] if use_mask else [])
    return out, _random_grads(out, [t for t in wanted if t is not None])
