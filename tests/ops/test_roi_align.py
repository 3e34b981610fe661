"""opkiln.roi_align: torchvision's RoIAlign, checked against a pure-PyTorch reference
(tests/support/roi_align_reference.py) and, where it is importable, torchvision itself."""

from __future__ import annotations

import math

import pytest
import torch

import opkiln
from support.ops_reference import DEVICES, FLOAT_DTYPES, HAS_CUDA, TOL
from support.roi_align_reference import random_rois, roi_align_ref

# What tests/wheels/test_wheel_install.py runs in a fresh venv after `pip install` of each wheel
# (op name -> a Python expression over torch and opkiln).
INSTALL_SAMPLES = {"roi_align": "opkiln.roi_align(torch.arange(32.).reshape(1, 2, 4, 4),"
                                " torch.tensor([[0., 0, 0, 3, 3]]), 2, 1.0, 2, True)",
                   "RoIAlign": "opkiln.RoIAlign((2, 2), 1.0, 2, True)(torch.arange(32.).reshape(1, 2, 4, 4),"
                               " [torch.tensor([[0., 0, 3, 3]])])"}

# (N, C, H, W, K, pooled_height, pooled_width, spatial_scale)
CASES = [
    (1, 1, 1, 1, 1, 1, 1, 1.0),
    (2, 3, 7, 9, 5, 2, 3, 1.0),
    (3, 4, 16, 12, 17, 7, 7, 0.5),
    (1, 2, 5, 5, 4, 3, 3, 2.0),
    (2, 5, 20, 31, 9, 4, 5, 0.25),
]
SAMPLING_RATIOS = [-1, 0, 1, 2, 3]


def _inputs(case: tuple[int, int, int, int, int, int, int, float], dtype: torch.dtype, device: str,
            seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    n, c, h, w, k, _, _, scale = case
    x = torch.randn(n, c, h, w, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    rois = random_rois(k, n, h, w, torch.float64, seed=seed, spatial_scale=scale)
    return x.to(device, dtype), rois.to(device, dtype)


def _grad_tol(dtype: torch.dtype) -> dict[str, float]:
    # A gradient entry sums several rois' and samples' contributions: allow for the order.
    tol = TOL[dtype]
    return {"atol": tol["atol"] * 4, "rtol": tol["rtol"] * 4}


# ---------------------------------------------------------------------------- hand-checked values


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_hand_checked_values(device: str, dtype: torch.dtype) -> None:
    # input[y, x] = 4 y + x + 1 is bilinear, so a sample inside the map reads exactly 4 y + x + 1,
    # a sample clamped to (0, 0) reads 1, and a sample outside the map counts 0.
    x = (torch.arange(16, dtype=dtype, device=device) + 1).view(1, 1, 4, 4)

    def one(roi: list[float], aligned: bool, sampling_ratio: int = 1, scale: float = 1.0) -> float:
        rois = torch.tensor([[0.0, *roi]], dtype=dtype, device=device)
        return float(opkiln.roi_align(x, rois, (1, 1), scale, sampling_ratio, aligned))

    assert one([0, 0, 3, 3], False) == 8.5  # one sample at the centre (1.5, 1.5)
    assert one([0, 0, 3, 3], True) == 6.0  # shifted by half a pixel: (1, 1)
    assert one([0, 0, 6, 6], False, scale=0.5) == 8.5  # spatial_scale maps the box first
    # Two by two samples at 0.75 and 2.25 per axis: the mean is still the centre.
    assert one([0, 0, 3, 3], False, sampling_ratio=2) == 8.5
    # Past the last row/column (but not past H, W) a sample reads it: (3.5, 3.5) -> input[3, 3].
    assert one([3, 3, 4, 4], False) == 16.0
    # A coordinate in [-1, 0) is clamped to 0; one below -1 makes the sample 0.
    assert one([-0.9, -0.9, -0.5, -0.5], False) == 1.0  # widened to 1 pixel: centre (-0.4, -0.4)
    assert one([-1.6, -1.6, -0.4, -0.4], True) == 0.0  # centre (-1.5, -1.5)
    # Not aligned: a degenerate box is widened to 1 pixel. Aligned: an inverted box has no
    # adaptive samples (output 0), but a fixed sampling ratio still samples it, backwards.
    assert one([1, 1, 1, 1], False) == 8.5
    assert one([2, 2, 1, 1], True, sampling_ratio=0) == 0.0
    assert one([2, 2, 1, 1], True, sampling_ratio=1) == 6.0  # 2 - 0.5 + (-1) / 2 = 1: input[1, 1]


@pytest.mark.parametrize("device", DEVICES)
def test_adaptive_sampling_counts_ceil_of_bin_size(device: str) -> None:
    # A quadratic input tells the sample count apart: the mean of (x - 0.5)^2 over n evenly
    # spaced samples of [0, 1) depends on n. One bin of width 2.5 samples ceil(2.5) = 3 times.
    xs = torch.arange(8, dtype=torch.float64)
    plane = (xs.view(1, 8) ** 2).expand(8, 8).contiguous()
    x = plane.view(1, 1, 8, 8).to(device)
    rois = torch.tensor([[0.0, 1.0, 1.0, 3.5, 3.5]], dtype=torch.float64, device=device)
    adaptive = float(opkiln.roi_align(x, rois, (1, 1), 1.0, 0, False))
    three = float(opkiln.roi_align(x, rois, (1, 1), 1.0, 3, False))
    assert adaptive == three
    assert adaptive != float(opkiln.roi_align(x, rois, (1, 1), 1.0, 2, False))
    # Samples at 1 + (i + 0.5) * 2.5 / 3 interpolate x^2 linearly between integers.
    samples = [1 + (i + 0.5) * 2.5 / 3 for i in range(3)]
    lin = [math.floor(s) ** 2 + (s - math.floor(s)) * ((math.floor(s) + 1) ** 2 - math.floor(s) ** 2) for s in samples]
    assert adaptive == pytest.approx(sum(lin) / 3, abs=1e-12)


# ---------------------------------------------------------------------------- against the reference


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("sampling_ratio", SAMPLING_RATIOS)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_forward_matches_reference(device: str, dtype: torch.dtype, aligned: bool, sampling_ratio: int,
                                   case: tuple[int, int, int, int, int, int, int, float]) -> None:
    x, rois = _inputs(case, dtype, device, seed=sum(case[:5]))
    _, _, _, _, k, ph, pw, scale = case
    out = opkiln.roi_align(x, rois, (ph, pw), scale, sampling_ratio, aligned)
    assert out.shape == (k, x.shape[1], ph, pw) and out.dtype == dtype and out.device == x.device
    assert out.is_contiguous()
    torch.testing.assert_close(out, roi_align_ref(x, rois, scale, ph, pw, sampling_ratio, aligned), **TOL[dtype])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("sampling_ratio", [-1, 2])
@pytest.mark.parametrize("case", CASES[1:], ids=str)
def test_backward_matches_reference(device: str, dtype: torch.dtype, aligned: bool, sampling_ratio: int,
                                    case: tuple[int, int, int, int, int, int, int, float]) -> None:
    x, rois = _inputs(case, dtype, device, seed=7 + sum(case[:5]))
    _, _, _, _, _, ph, pw, scale = case
    x.requires_grad_(True)
    out = opkiln.roi_align(x, rois, (ph, pw), scale, sampling_ratio, aligned)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64).to(device, dtype)
    (gx,) = torch.autograd.grad(out, x, grad)
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    xr = x.detach().to(acc).requires_grad_(True)
    (gr,) = torch.autograd.grad(roi_align_ref(xr, rois, scale, ph, pw, sampling_ratio, aligned), xr, grad.to(acc))
    assert gx.dtype == dtype and gx.shape == x.shape
    torch.testing.assert_close(gx, gr.to(dtype), **_grad_tol(dtype))


def test_cpu_results_do_not_depend_on_thread_count() -> None:
    # The CPU backward owns whole grad_input planes and sums each in a fixed order.
    x, rois = _inputs((2, 8, 24, 24, 64, 7, 7, 0.5), torch.float32, "cpu", seed=11)
    x.requires_grad_(True)
    threads = torch.get_num_threads()
    results = []
    try:
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            out = opkiln.roi_align(x, rois, (7, 7), 0.5, -1, True)
            (gx,) = torch.autograd.grad(out, x, torch.ones_like(out))
            results.append((out, gx))
    finally:
        torch.set_num_threads(threads)
    for out, gx in results[1:]:
        assert torch.equal(out, results[0][0]) and torch.equal(gx, results[0][1])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("sampling_ratio", [0, 2])
@pytest.mark.parametrize("aligned", [False, True])
def test_non_finite_and_absurd_boxes_give_zero(device: str, sampling_ratio: int, aligned: bool) -> None:
    # torchvision's int cast of such a sample count is undefined (or loops ~forever): here
    # such a box has no samples, its output is 0 and it gives no gradient; others are unchanged.
    inf, nan = float("inf"), float("nan")
    boxes = [[0, 0, inf, 4], [nan, 0, 4, 4], [0, 0, 1e12, 4], [-inf, 0, 4, 4], [0, -1e12, 4, 4], [1, 1, 5, 6]]
    rois = torch.tensor([[0.0, *b] for b in boxes], device=device)
    x = torch.randn(1, 2, 8, 8, generator=torch.Generator().manual_seed(3)).to(device).requires_grad_(True)
    out = opkiln.roi_align(x, rois, (2, 2), 1.0, sampling_ratio, aligned)
    assert torch.equal(out[:5], torch.zeros_like(out[:5]))
    torch.testing.assert_close(out[5:], opkiln.roi_align(x, rois[5:], (2, 2), 1.0, sampling_ratio, aligned))
    (gx,) = torch.autograd.grad(out[:5].sum(), x)
    assert torch.equal(gx, torch.zeros_like(gx))


# ---------------------------------------------------------------------------- empty and strided inputs


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_empty_rois_and_empty_input(device: str, dtype: torch.dtype) -> None:
    x = torch.randn(2, 3, 5, 6, dtype=dtype, device=device, requires_grad=True)
    out = opkiln.roi_align(x, torch.empty(0, 5, dtype=dtype, device=device), (2, 3), 1.0, -1, False)
    assert out.shape == (0, 3, 2, 3) and out.dtype == dtype and out.device == x.device
    out.sum().backward()
    assert x.grad is not None and torch.equal(x.grad, torch.zeros_like(x))
    no_batch = torch.empty(0, 3, 5, 6, dtype=dtype, device=device)
    assert opkiln.roi_align(no_batch, torch.empty(0, 5, dtype=dtype, device=device), (2, 2), 1.0, 0, True).shape == (
        0, 3, 2, 2)
    rois = torch.tensor([[1.0, 0.0, 0.0, 4.0, 4.0]], dtype=dtype, device=device)
    assert opkiln.roi_align(x.detach()[:, :0], rois, (2, 2), 1.0, 0, True).shape == (1, 0, 2, 2)
    # A feature map without pixels: every sample is outside, the output is 0.
    flat = torch.empty(2, 3, 0, 6, dtype=dtype, device=device)
    assert torch.equal(opkiln.roi_align(flat, rois, (2, 2), 1.0, 2, False), torch.zeros(1, 3, 2, 2, dtype=dtype,
                                                                                      device=device))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_non_contiguous_inputs(device: str, dtype: torch.dtype) -> None:
    case = (2, 6, 11, 13, 8, 3, 4, 0.5)
    x, rois = _inputs(case, dtype, device, seed=5)
    ref = roi_align_ref(x, rois, 0.5, 3, 4, 2, True)
    channels_last = x.contiguous(memory_format=torch.channels_last)
    wide = torch.zeros(2, 12, 11, 26, dtype=dtype, device=device)
    wide[:, ::2, :, ::2] = x
    roi_cols = torch.zeros(rois.shape[0], 10, dtype=dtype, device=device)
    roi_cols[:, ::2] = rois
    transposed_rois = rois.t().contiguous().t()
    for xs, rs in [(channels_last, rois), (wide[:, ::2, :, ::2], rois), (x, roi_cols[:, ::2]), (x, transposed_rois)]:
        torch.testing.assert_close(opkiln.roi_align(xs, rs, (3, 4), 0.5, 2, True), ref, **TOL[dtype])
    xg = wide[:, ::2, :, ::2].detach().requires_grad_(True)
    out = opkiln.roi_align(xg, roi_cols[:, ::2], (3, 4), 0.5, 2, True)
    # An expanded (stride 0) output gradient, as sum() gives.
    out.sum().backward()
    acc = torch.float32
    xr = x.detach().to(acc).requires_grad_(True)
    roi_align_ref(xr, rois, 0.5, 3, 4, 2, True).sum().backward()
    assert xg.grad is not None and xr.grad is not None
    torch.testing.assert_close(xg.grad, xr.grad.to(dtype), **_grad_tol(dtype))


# ---------------------------------------------------------------------------- autograd, opcheck, compile


def test_gradcheck_float64() -> None:
    for aligned in (False, True):
        for sampling_ratio in (-1, 2):
            x, rois = _inputs((2, 2, 6, 7, 4, 2, 3, 0.75), torch.float64, "cpu", seed=21 + sampling_ratio)
            x.requires_grad_(True)
            assert torch.autograd.gradcheck(
                lambda t, r=rois, a=aligned, s=sampling_ratio: opkiln.roi_align(t, r, (2, 3), 0.75, s, a), (x,))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("requires_grad", [False, True])
def test_opcheck(device: str, requires_grad: bool) -> None:
    for case, sampling_ratio, aligned in [((2, 3, 7, 9, 5, 2, 3, 1.0), -1, False),
                                          ((1, 2, 8, 8, 3, 4, 4, 0.5), 2, True),
                                          ((2, 3, 7, 9, 0, 2, 2, 1.0), 0, True)]:
        x, rois = _inputs(case, torch.float32, device, seed=9)
        x.requires_grad_(requires_grad)
        _, _, _, _, _, ph, pw, scale = case
        torch.library.opcheck(torch.ops.opkiln.roi_align.default, (x, rois, scale, ph, pw, sampling_ratio, aligned))


def test_torch_compile_fullgraph() -> None:
    x, rois = _inputs((2, 3, 9, 9, 6, 3, 3, 1.0), torch.float32, "cpu", seed=13)
    x.requires_grad_(True)
    f = torch.compile(lambda t, r: opkiln.roi_align(t * 2, r, (3, 3), 1.0, 2, True).relu(), fullgraph=True,
                      backend="aot_eager")
    out = f(x, rois)
    out.sum().backward()
    xr = x.detach().clone().requires_grad_(True)
    ref = roi_align_ref(xr * 2, rois, 1.0, 3, 3, 2, True).relu()
    ref.sum().backward()
    torch.testing.assert_close(out, ref)
    assert x.grad is not None and xr.grad is not None
    torch.testing.assert_close(x.grad, xr.grad)


# ---------------------------------------------------------------------------- bad input

_X = torch.zeros(2, 3, 4, 4)
_ROIS = torch.tensor([[0.0, 0, 0, 2, 2], [1.0, 1, 1, 3, 3]])


def _rois_with_batch(index: float) -> torch.Tensor:
    rois = _ROIS.clone()
    rois[1, 0] = index
    return rois


@pytest.mark.parametrize(
    ("x", "rois", "pooled", "error", "match"),
    [
        (_X, torch.zeros(3, 5, 1), (2, 2), RuntimeError, r"rois must have shape \[K, 5\]"),
        (torch.zeros(3, 4, 4), _ROIS, (2, 2), RuntimeError, r"input must have shape \[N, C, H, W\]"),
        # Wrong dtypes are RuntimeErrors in both ABI modes (and in torchvision).
        (_X, _ROIS.double(), (2, 2), RuntimeError, "cast one of them"),
        (_X.half(), _ROIS, (2, 2), RuntimeError, "cast one of them"),
        (_X.long(), _ROIS.long(), (2, 2), RuntimeError, "must be float32"),
        (_X, _rois_with_batch(2.0), (2, 2), ValueError, r"rois\[1, 0\] = 2.* out of range \[0, 2\)"),
        (_X, _rois_with_batch(-1.0), (2, 2), ValueError, r"rois\[1, 0\] = -1.* out of range \[0, 2\)"),
        (_X, _rois_with_batch(float("nan")), (2, 2), ValueError, r"batch index out of range \[0, 2\)"),
        (_X[:0], _ROIS, (2, 2), ValueError, r"rois\[0, 0\] = 0.* out of range \[0, 0\)"),
        (_X, _ROIS, (-1, 2), ValueError, "pooled_height and pooled_width must be >= 0"),
        (_X, _ROIS, (2, -1), ValueError, "pooled_height and pooled_width must be >= 0"),
    ],
)
def test_bad_arguments_raise(x: torch.Tensor, rois: torch.Tensor, pooled: tuple[int, int], error: type[Exception],
                             match: str) -> None:
    # The registered op and the torchvision-style wrapper raise the same error.
    with pytest.raises(error, match=match):
        torch.ops.opkiln.roi_align(x, rois, 1.0, pooled[0], pooled[1], -1, False)
    with pytest.raises(error, match=match):
        opkiln.roi_align(x, rois, pooled, 1.0, -1, False)


@pytest.mark.parametrize("boxes", [torch.zeros(3, 4), torch.zeros(3, 6)], ids=["K4", "K6"])
def test_boxes_of_the_wrong_shape_fail_torchvisions_assertion(boxes: torch.Tensor) -> None:
    with pytest.raises(AssertionError, match=r"not correct as Tensor\[K, 5\]"):
        opkiln.roi_align(_X, boxes, 2)
    with pytest.raises(RuntimeError, match=r"rois must have shape \[K, 5\]"):
        torch.ops.opkiln.roi_align(_X, boxes, 1.0, 2, 2, -1, False)


@pytest.mark.parametrize("pooled", [(0, 0), (0, 3), (2, 0)])
def test_zero_output_size_is_an_empty_result(pooled: tuple[int, int]) -> None:
    # As torchvision: no bins, nothing read; the gradient is zero.
    x = _X.clone().requires_grad_(True)
    out = opkiln.roi_align(x, _ROIS, pooled, 1.0, -1, True)
    assert out.shape == (2, 3, *pooled) and out.dtype == _X.dtype
    out.sum().backward()
    assert x.grad is not None and torch.equal(x.grad, torch.zeros_like(_X))


def test_batch_index_truncates_like_torchvision() -> None:
    # torchvision casts the batch index to int: 1.7 reads image 1 and -0.5 reads image 0.
    x = torch.randn(2, 3, 6, 6, generator=torch.Generator().manual_seed(1))
    boxes = torch.tensor([[1.0, 1.0, 5.0, 5.0]] * 2)
    truncated = torch.cat([torch.tensor([[1.7], [-0.5]]), boxes], 1)
    exact = torch.cat([torch.tensor([[1.0], [0.0]]), boxes], 1)
    assert torch.equal(opkiln.roi_align(x, truncated, (2, 2), 1.0, 2, False),
                       opkiln.roi_align(x, exact, (2, 2), 1.0, 2, False))


# ---------------------------------------------------------------------------- torchvision parity


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("sampling_ratio", [-1, 0, 2])
def test_matches_torchvision(device: str, dtype: torch.dtype, aligned: bool, sampling_ratio: int) -> None:
    tv_ops = pytest.importorskip("torchvision.ops")
    for case in [*CASES, (2, 16, 50, 60, 100, 7, 7, 1 / 8)]:
        x, rois = _inputs(case, dtype, device, seed=case[4])
        _, _, _, _, _, ph, pw, scale = case
        x.requires_grad_(True)
        xt = x.detach().clone().requires_grad_(True)
        out = opkiln.roi_align(x, rois, (ph, pw), scale, sampling_ratio, aligned)
        expected = tv_ops.roi_align(xt, rois, (ph, pw), scale, sampling_ratio, aligned)
        torch.testing.assert_close(out, expected, **TOL[dtype])
        grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(case[4]), dtype=dtype).to(device)
        out.backward(grad)
        expected.backward(grad)
        assert x.grad is not None and xt.grad is not None
        torch.testing.assert_close(x.grad, xt.grad, **_grad_tol(dtype))


# ---------------------------------------------------------------------------- CUDA only


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_cuda_mixed_devices_raise() -> None:
    with pytest.raises(RuntimeError, match="same device"):
        opkiln.roi_align(_X.cuda(), _ROIS, (2, 2), 1.0, -1, False)
    with pytest.raises(RuntimeError, match="same device"):
        opkiln.roi_align(_X, _ROIS.cuda(), (2, 2), 1.0, -1, False)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_cuda_bad_batch_index_raises() -> None:
    rois = _rois_with_batch(3.0).cuda()
    with pytest.raises(ValueError, match=r"rois\[1, 0\] = 3.* out of range \[0, 2\)"):
        opkiln.roi_align(_X.cuda(), rois, (2, 2), 1.0, -1, False)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("aligned", [False, True])
def test_cuda_matches_cpu_kernel_on_large_inputs(dtype: torch.dtype, aligned: bool) -> None:
    # Many rois over a detector-sized map: many atomics land on the same pixels.
    x, rois = _inputs((4, 64, 50, 68, 2000, 7, 7, 1 / 16), dtype, "cpu", seed=31)
    grad = torch.randn(2000, 64, 7, 7, generator=torch.Generator().manual_seed(1)).to(dtype)
    results = []
    for device in ("cpu", "cuda"):
        xd = x.detach().to(device).requires_grad_(True)  # a leaf on each device
        out = opkiln.roi_align(xd, rois.to(device), (7, 7), 1 / 16, 0, aligned)
        out.backward(grad.to(device))
        assert xd.grad is not None
        results.append((out.cpu(), xd.grad.cpu()))
    torch.testing.assert_close(results[1][0], results[0][0], **TOL[dtype])
    # Gradients are sums of up to thousands of terms: scale the tolerance by the magnitude.
    scale = float(results[0][1].abs().max())
    tol = TOL[dtype]
    torch.testing.assert_close(results[1][1], results[0][1], atol=tol["atol"] * 8 * max(scale, 1.0),
                               rtol=tol["rtol"] * 8)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_cuda_runs_on_the_current_stream() -> None:
    x, rois = _inputs((2, 32, 40, 40, 500, 7, 7, 0.5), torch.float32, "cpu", seed=41)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        xd, rd = x.to("cuda", non_blocking=True), rois.to("cuda", non_blocking=True)
        out = opkiln.roi_align(xd * 1.0, rd, (7, 7), 0.5, 2, True)
    stream.synchronize()
    torch.testing.assert_close(out.cpu(), roi_align_ref(x, rois, 0.5, 7, 7, 2, True))
