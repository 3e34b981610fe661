"""opkiln.ops.ps_roi_align / ps_roi_pool (the position-sensitive RoI family, ops/common/ps_roi.h):
against a scalar transliteration of torchvision's CPU kernels, against the real torchvision where it
is importable (tests/stable/test_torchvision_parity.py runs this file beside torchvision 0.29.1 in
both ABI modes), opcheck, gradients, input forms and bad input."""

import math
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch

try:  # the stable-ABI venvs run tests/ops with torch and pytest alone (tests/stable)
    from hypothesis import given, settings
    from hypothesis import strategies as st
except ImportError:
    given = None

from opkiln import ops
from support.ops_reference import HAS_CUDA

DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")])]
OPS = ("ps_roi_align", "ps_roi_pool")
# Called after every install as a user would ([tool.kiln] install-samples: kiln_tool.op_smoke).
INSTALL_SAMPLES = {
    "ps_roi_align": "opkiln.ps_roi_align(torch.arange(128.).reshape(1, 8, 4, 4), torch.tensor([[0., 0, 0, 3, 3]]),"
                    " 2, 1.0, 2)",
    "ps_roi_pool": "opkiln.ps_roi_pool(torch.arange(128.).reshape(1, 8, 4, 4), torch.tensor([[0., 0, 0, 3, 3]]), 2)",
    "PSRoIAlign": "opkiln.PSRoIAlign((2, 2), 1.0, 2)(torch.arange(128.).reshape(1, 8, 4, 4),"
                  " [torch.tensor([[0., 0, 3, 3]])])",
    "PSRoIPool": "opkiln.PSRoIPool(2, 1.0)(torch.arange(128.).reshape(1, 8, 4, 4), [torch.tensor([[0., 0, 3, 3]])])",
}


def _bilinear(plane: list[list[float]], y: float, x: float) -> tuple[float, list[tuple[int, int, float]]]:
    height, width = len(plane), len(plane[0])
    if not (-1.0 <= y <= height and -1.0 <= x <= width):
        return 0.0, []
    y, x = max(y, 0.0), max(x, 0.0)
    y_lo, x_lo = int(y), int(x)
    y_hi, x_hi = y_lo + 1, x_lo + 1
    if y_lo >= height - 1:
        y_lo = y_hi = height - 1
        y = float(y_lo)
    if x_lo >= width - 1:
        x_lo = x_hi = width - 1
        x = float(x_lo)
    ly, lx = y - y_lo, x - x_lo
    hy, hx = 1 - ly, 1 - lx
    taps = [(y_lo, x_lo, hy * hx), (y_lo, x_hi, hy * lx), (y_hi, x_lo, ly * hx), (y_hi, x_hi, ly * lx)]
    return sum(w * plane[r][c] for r, c, w in taps), taps


def _div(a: float, b: float) -> float:
    return a / b if b != 0 else (math.nan if a == 0 else math.copysign(math.inf, a))


def ps_roi_align_ref(x: torch.Tensor, rois: torch.Tensor, scale: float, ph_n: int, pw_n: int,
                     sampling_ratio: int) -> tuple[torch.Tensor, torch.Tensor]:
    """torchvision's ps_roi_align CPU kernel, scalar by scalar in float64: (output, grad_input for ones)."""
    n, c, h, w = x.shape
    c_out = c // (ph_n * pw_n)
    data = x.double().tolist()
    out = torch.zeros(rois.shape[0], c_out, ph_n, pw_n, dtype=torch.float64)
    grad = torch.zeros(n, c, h, w, dtype=torch.float64)
    for k, (b, x1, y1, x2, y2) in enumerate(rois.double().tolist()):
        b = int(b)
        sx, sy = x1 * scale - 0.5, y1 * scale - 0.5
        bin_h, bin_w = (y2 * scale - 0.5 - sy) / ph_n, (x2 * scale - 0.5 - sx) / pw_n
        gh = sampling_ratio if sampling_ratio > 0 else math.ceil(bin_h)
        gw = sampling_ratio if sampling_ratio > 0 else math.ceil(bin_w)
        count = gh * gw
        for co in range(c_out):
            for ph in range(ph_n):
                for pw in range(pw_n):
                    ci = (co * ph_n + ph) * pw_n + pw
                    total = 0.0
                    for iy in range(gh):
                        y = ph * bin_h + sy + (iy + 0.5) * bin_h / gh
                        for ix in range(gw):
                            v, taps = _bilinear(data[b][ci], y, pw * bin_w + sx + (ix + 0.5) * bin_w / gw)
                            total += v
                            for r, col, wt in taps:
                                grad[b, ci, r, col] += _div(wt, count)
                    out[k, co, ph, pw] = _div(total, count)
    return out, grad


def ps_roi_pool_ref(x: torch.Tensor, rois: torch.Tensor, scale: float, ph_n: int,
                    pw_n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """torchvision's ps_roi_pool CPU kernel, scalar by scalar in float64: (output, grad_input for ones)."""
    n, c, h, w = x.shape
    c_out = c // (ph_n * pw_n)
    out = torch.zeros(rois.shape[0], c_out, ph_n, pw_n, dtype=torch.float64)
    grad = torch.zeros(n, c, h, w, dtype=torch.float64)
    xd = x.double()

    def rnd(v: float) -> int:
        return int(math.copysign(math.floor(abs(v) + 0.5), v))

    for k, (b, x1, y1, x2, y2) in enumerate(rois.double().tolist()):
        b = int(b)
        sx, sy = rnd(x1 * scale), rnd(y1 * scale)
        bin_h = max(rnd(y2 * scale) - sy, 1) / ph_n
        bin_w = max(rnd(x2 * scale) - sx, 1) / pw_n
        for ph in range(ph_n):
            for pw in range(pw_n):
                lo_h, hi_h = math.floor(ph * bin_h) + sy, math.ceil((ph + 1) * bin_h) + sy
                lo_w, hi_w = math.floor(pw * bin_w) + sx, math.ceil((pw + 1) * bin_w) + sx
                for co in range(c_out):
                    ci = (co * ph_n + ph) * pw_n + pw
                    h0, h1 = (min(max(v, 0), h - 1) for v in (lo_h, hi_h))
                    w0, w1 = (min(max(v, 0), w - 1) for v in (lo_w, hi_w))
                    if h1 > h0 and w1 > w0:
                        out[k, co, ph, pw] = xd[b, ci, h0:h1, w0:w1].mean()
                    h0, h1 = (min(max(v, 0), h) for v in (lo_h, hi_h))
                    w0, w1 = (min(max(v, 0), w) for v in (lo_w, hi_w))
                    if h1 > h0 and w1 > w0:
                        grad[b, ci, h0:h1, w0:w1] += 1.0 / ((h1 - h0) * (w1 - w0))
    return out, grad


def _rois(k: int, n: int, h: int, w: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Boxes of every kind: inside, across the border, degenerate (x1 == x2), reversed, tiny."""
    g = torch.Generator().manual_seed(seed)
    b = torch.randint(0, n, (k, 1), generator=g).to(dtype)
    p1 = torch.rand(k, 2, generator=g, dtype=torch.float64) * torch.tensor([w + 4.0, h + 4.0]) - 2
    size = torch.rand(k, 2, generator=g, dtype=torch.float64) * torch.tensor([w * 1.0, h * 1.0]) - 1
    boxes = torch.cat([p1, p1 + size], dim=1)
    if k >= 3:
        boxes[0, 2] = boxes[0, 0]  # zero width
        boxes[1, 2:] = boxes[1, :2] - 2  # reversed
        boxes[2, 2:] = boxes[2, :2] + 0.25  # tiny
    return torch.cat([b, boxes.to(dtype)], dim=1)


def _call(name: str, x: torch.Tensor, rois: Any, size: Any, scale: float, sampling_ratio: int) -> torch.Tensor:
    if name == "ps_roi_align":
        return ops.ps_roi_align(x, rois, size, scale, sampling_ratio)
    return ops.ps_roi_pool(x, rois, size, scale)


def _ref(name: str, x: torch.Tensor, rois: torch.Tensor, ph: int, pw: int, scale: float,
         sampling_ratio: int) -> tuple[torch.Tensor, torch.Tensor]:
    if name == "ps_roi_align":
        return ps_roi_align_ref(x, rois, scale, ph, pw, sampling_ratio)
    return ps_roi_pool_ref(x, rois, scale, ph, pw)


def _generated(test: Callable[..., None]) -> Callable[..., None]:
    """Generated cases with hypothesis; a skip naming it where it is not installed."""
    if given is None:
        def skipped() -> None:
            pytest.skip("needs hypothesis (requirements/test.txt)")
        return skipped
    return settings(max_examples=25, deadline=None)(given(
        name=st.sampled_from(OPS), dtype=st.sampled_from([torch.float32, torch.float64]),
        ph=st.integers(1, 3), pw=st.integers(1, 3), c_out=st.integers(1, 2), h=st.integers(1, 9),
        w=st.integers(1, 9), k=st.integers(0, 6), scale=st.sampled_from([1.0, 0.5, 0.75]),
        sampling_ratio=st.integers(-1, 3), seed=st.integers(0, 2**16))(test))


@_generated
def test_matches_the_reference(name: str, dtype: torch.dtype, ph: int, pw: int, c_out: int, h: int, w: int, k: int,
                               scale: float, sampling_ratio: int, seed: int) -> None:
    x = torch.randn(2, c_out * ph * pw, h, w, generator=torch.Generator().manual_seed(seed), dtype=dtype)
    rois = _rois(k, 2, h, w, dtype, seed)
    x.requires_grad_(True)
    out = _call(name, x, rois, (ph, pw), scale, sampling_ratio)
    want, want_grad = _ref(name, x.detach(), rois, ph, pw, scale, sampling_ratio)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-12, "atol": 1e-12}
    torch.testing.assert_close(out.double(), want, equal_nan=True, **tol)
    out.backward(torch.ones_like(out))
    assert x.grad is not None
    torch.testing.assert_close(x.grad.double(), want_grad, equal_nan=True, **tol)


def _tv() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pytest.importorskip("torchvision.ops")


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("sampling_ratio", [-1, 2])
@pytest.mark.parametrize("seed", range(3))
def test_matches_torchvision(name: str, dtype: torch.dtype, sampling_ratio: int, seed: int) -> None:
    tv = _tv()
    x = torch.randn(2, 2 * 3 * 2, 11, 9, generator=torch.Generator().manual_seed(seed), dtype=dtype)
    rois = _rois(12, 2, 11, 9, dtype, seed)
    args: tuple[Any, ...] = ((3, 2), 0.5, sampling_ratio) if name == "ps_roi_align" else ((3, 2), 0.5)
    ours_x, theirs_x = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    ours, theirs = getattr(ops, name)(ours_x, rois, *args), getattr(tv, name)(theirs_x, rois, *args)
    exact = {"rtol": 0, "atol": 0} if dtype == torch.float64 else {"rtol": 1e-6, "atol": 1e-6}
    torch.testing.assert_close(ours, theirs, equal_nan=True, **exact)
    g = torch.randn(ours.shape, generator=torch.Generator().manual_seed(seed + 1), dtype=dtype)
    ours.backward(g)
    theirs.backward(g)
    torch.testing.assert_close(ours_x.grad, theirs_x.grad, equal_nan=True, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(name: str, device: str) -> None:
    x = torch.randn(2, 8, 7, 6, dtype=torch.float64, device=device, requires_grad=True)
    rois = torch.tensor([[0, 0.5, 1, 5, 6], [1, 1, 0, 4.5, 3]], dtype=torch.float64, device=device)
    extra = [2] if name == "ps_roi_align" else []
    torch.library.opcheck(getattr(torch.ops.opkiln, name).default, (x, rois, 0.8, 2, 2, *extra))


@pytest.mark.parametrize("name", OPS)
def test_gradcheck(name: str) -> None:
    x = torch.randn(1, 4, 6, 6, dtype=torch.float64, requires_grad=True)
    rois = torch.tensor([[0, 0.3, 0.6, 4.7, 5.2]], dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda t: _call(name, t, rois, 2, 1.0, 2), (x,))


@pytest.mark.parametrize("name", OPS)
def test_half_runs_in_float32(name: str) -> None:
    x = torch.randn(2, 8, 7, 6)
    rois = _rois(5, 2, 7, 6, torch.float32, 0)
    for dtype in (torch.float16, torch.bfloat16):
        got = _call(name, x.to(dtype), rois.to(dtype), 2, 1.0, 2)
        want = _call(name, x.to(dtype).float(), rois.to(dtype).float(), 2, 1.0, 2)
        torch.testing.assert_close(got, want.to(dtype), equal_nan=True)
        with torch.autocast("cpu", dtype=dtype):
            assert _call(name, x.to(dtype), rois.to(dtype), 2, 1.0, 2).dtype == dtype


@pytest.mark.parametrize("name", OPS)
def test_input_forms_and_modules(name: str) -> None:
    x = torch.randn(2, 8, 7, 6, generator=torch.Generator().manual_seed(0))
    rois = torch.tensor([[0, 0.5, 1, 5, 6], [1, 1, 0, 4.5, 3], [0, 2, 2, 3, 3]])
    by_tensor = _call(name, x, rois, 2, 0.9, 2)
    assert by_tensor.shape == (3, 2, 2, 2)
    torch.testing.assert_close(_call(name, x, rois, (2, 2), 0.9, 2), by_tensor, rtol=0, atol=0)
    torch.testing.assert_close(_call(name, x, [rois[rois[:, 0] == 0, 1:], rois[rois[:, 0] == 1, 1:]], 2, 0.9, 2),
                               by_tensor[[0, 2, 1]], rtol=0, atol=0)
    module = ops.PSRoIAlign(2, 0.9, 2) if name == "ps_roi_align" else ops.PSRoIPool(2, 0.9)
    torch.testing.assert_close(module(x, rois), by_tensor, rtol=0, atol=0)
    assert repr(module) == ("PSRoIAlign(output_size=2, spatial_scale=0.9, sampling_ratio=2)"
                            if name == "ps_roi_align" else "PSRoIPool(output_size=2, spatial_scale=0.9)")
    scripted = torch.jit.script(getattr(ops, name))
    torch.testing.assert_close(scripted(x, rois, 2, 0.9, *([2] if name == "ps_roi_align" else [])), by_tensor)
    assert _call(name, x, torch.empty(0, 5), 2, 1.0, 2).shape == (0, 2, 2, 2)


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize(("args", "error", "match"), [
    ((torch.randn(1, 6, 4, 4), torch.tensor([[0, 0, 0, 2, 2.0]]), 2), RuntimeError, "multiple of pooled_height"),
    ((torch.randn(1, 4, 4, 4), torch.tensor([[1, 0, 0, 2, 2.0]]), 2), ValueError, r"rois\[0, 0\] = 1 is a batch"),
    ((torch.randn(1, 4, 4, 4), torch.tensor([[0, 0, 0, 2, 2.0]]), 0), ValueError, "must be positive"),
    ((torch.randn(1, 4, 4, 4), torch.tensor([[0, 0, 0, 2.0]]), 2), AssertionError, r"Tensor\[K, 5\]"),
    ((torch.randn(1, 4, 4, 4), torch.tensor([[0, 0, 0, 2, 2]], dtype=torch.float64), 2), RuntimeError, "cast one"),
    ((torch.randn(4, 4, 4), torch.tensor([[0, 0, 0, 2, 2.0]]), 2), RuntimeError, r"\[N, C, H, W\]"),
])
def test_bad_input_raises(name: str, args: tuple[Any, ...], error: type[Exception], match: str) -> None:
    call: Callable[..., Any] = getattr(ops, name)
    with pytest.raises(error, match=match):
        call(*args)
