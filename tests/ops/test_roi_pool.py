"""opkiln.roi_pool against a pure-PyTorch reference, opcheck, gradients and bad input (docs/adding-an-op.md,
step 5). Started from `kiln new-op roi_pool --backward --schema ...`; torchvision parity lives in
test_torchvision_compat.py (which tests/stable runs beside the real torchvision in both ABI modes)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor

import opkiln
from support.ops_reference import CUDA, DEVICES, FLOAT_DTYPES, TOL
from support.roi_align_reference import random_rois
from support.roi_pool_reference import roi_pool_backward_ref, roi_pool_ref

# What tests/wheels/test_wheel_install.py runs in a fresh venv after `pip install` of each wheel
# (op name -> a Python expression over torch and opkiln).
INSTALL_SAMPLES = {"roi_pool": "opkiln.roi_pool(torch.arange(32.).reshape(1, 2, 4, 4),"
                               " torch.tensor([[0., 0, 0, 3, 3]]), 2)",
                   "RoIPool": "opkiln.RoIPool(2, 0.5)(torch.arange(32.).reshape(1, 2, 4, 4),"
                              " [torch.tensor([[0., 0, 6, 6]])])"}


def sample_args(device: str, dtype: torch.dtype, *, seed: int = 0, empty: bool = False,
                spatial_scale: float = 0.5) -> tuple[Any, ...]:
    """Input [2, 3, 9, 11] of distinct values (no ties: gradcheck's perturbations keep every argmax),
    rois spread a little past the map (some tiny, some inverted), 3 x 4 bins."""
    g = torch.Generator().manual_seed(seed)
    x = (torch.randperm(2 * 3 * 9 * 11, generator=g).double() / 64 - 1).view(2, 3, 9, 11)
    rois = random_rois(0 if empty else 8, 2, 9, 11, torch.float64, seed=seed + 1, spatial_scale=spatial_scale)
    return x.to(device, dtype), rois.to(device, dtype), spatial_scale, 3, 4


def _backward(args: tuple[Any, ...], grad: Tensor) -> tuple[Tensor, Tensor]:
    """(opkiln's grad_input through autograd, the reference's through the reference argmax)."""
    x = args[0].detach().requires_grad_(True)
    out, _ = torch.ops.opkiln.roi_pool(x, *args[1:])
    (got,) = torch.autograd.grad(out, x, grad)
    _, ref_argmax = roi_pool_ref(*args)
    return got, roi_pool_backward_ref(grad, args[1], ref_argmax, tuple(x.shape))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("spatial_scale", [1.0, 0.5, 0.37], ids=lambda s: f"scale{s}")
def test_matches_reference(device: str, dtype: torch.dtype, spatial_scale: float) -> None:
    args = sample_args(device, dtype, spatial_scale=spatial_scale)
    out, argmax = torch.ops.opkiln.roi_pool(*args)
    ref_out, ref_argmax = roi_pool_ref(*args)
    assert out.dtype == dtype and argmax.dtype == torch.int32 and out.device == args[0].device
    # A max selects: the same value and index, to the bit, in every dtype.
    assert torch.equal(out, ref_out) and torch.equal(argmax, ref_argmax)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_gradient_matches_reference(device: str, dtype: torch.dtype) -> None:
    args = sample_args(device, dtype)
    grad = torch.randn(8, 3, 3, 4, generator=torch.Generator().manual_seed(3), dtype=torch.float64).to(device, dtype)
    got, want = _backward(args, grad)
    torch.testing.assert_close(got, want, **TOL[dtype])


def test_hand_checked_values() -> None:
    # One 4 x 4 plane 0..15, one roi over all of it at scale 1: 2 x 2 bins of 2 x 2 pixels each.
    x = torch.arange(16.0).view(1, 1, 4, 4)
    out, argmax = torch.ops.opkiln.roi_pool(x, torch.tensor([[0.0, 0, 0, 3, 3]]), 1.0, 2, 2)
    assert out.flatten().tolist() == [5.0, 7.0, 13.0, 15.0] and argmax.flatten().tolist() == [5, 7, 13, 15]
    # A roi entirely left of the plane: every bin is empty, 0 with argmax -1.
    out, argmax = torch.ops.opkiln.roi_pool(x, torch.tensor([[0.0, -9, 0, -5, 3]]), 1.0, 2, 2)
    assert out.flatten().tolist() == [0.0] * 4 and argmax.flatten().tolist() == [-1] * 4
    # Rounding half away from zero: x2 = 1.5 -> 2, so the roi is 3 pixels wide.
    out, argmax = torch.ops.opkiln.roi_pool(x, torch.tensor([[0.0, 0, 0, 1.5, 0]]), 1.0, 1, 1)
    assert argmax.item() == 2


def test_nan_never_wins_and_ties_take_the_first() -> None:
    x = torch.tensor([[[[float("nan"), 1.0], [1.0, float("nan")]]]])
    out, argmax = torch.ops.opkiln.roi_pool(x, torch.tensor([[0.0, 0, 0, 1, 1]]), 1.0, 1, 1)
    assert out.item() == 1.0 and argmax.item() == 1


@pytest.mark.parametrize("device", DEVICES)
def test_empty_rois_channels_and_bins(device: str) -> None:
    x, rois, scale, ph, pw = sample_args(device, torch.float32, empty=True)
    out, argmax = torch.ops.opkiln.roi_pool(x, rois, scale, ph, pw)
    assert out.shape == argmax.shape == (0, 3, 3, 4)
    x, rois, *_ = sample_args(device, torch.float32)
    assert opkiln.roi_pool(x, rois, (0, 4)).shape == (8, 3, 0, 4)
    assert opkiln.roi_pool(x[:, :0], rois, 2).shape == (8, 0, 2, 2)
    grad_x = x.detach().requires_grad_(True)
    opkiln.roi_pool(grad_x, rois, (0, 4)).sum().backward()
    assert grad_x.grad is not None and not grad_x.grad.any()


@pytest.mark.parametrize("device", DEVICES)
def test_non_contiguous_inputs(device: str) -> None:
    x, rois, *rest = sample_args(device, torch.float64)
    x_nc = x.transpose(2, 3).contiguous().transpose(2, 3)
    rois_nc = torch.stack([rois, rois], 2)[..., 0]
    assert not x_nc.is_contiguous() and not rois_nc.is_contiguous() and torch.equal(rois_nc, rois)
    for got, want in zip(torch.ops.opkiln.roi_pool(x_nc, rois_nc, *rest), roi_pool_ref(x, rois, *rest), strict=True):
        assert torch.equal(got, want)
    grad = torch.randn(8, 3, 3, 4, dtype=torch.float64, device=device).transpose(2, 3).contiguous().transpose(2, 3)
    got, want = _backward((x_nc, rois_nc, *rest), grad)
    torch.testing.assert_close(got, want, **TOL[torch.float64])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("requires_grad", [False, True], ids=["no_grad", "grad"])
def test_opcheck(device: str, requires_grad: bool) -> None:
    x, *rest = sample_args(device, torch.float64)
    torch.library.opcheck(torch.ops.opkiln.roi_pool.default, (x.requires_grad_(requires_grad), *rest))


def test_gradcheck() -> None:
    x, rois, *rest = sample_args("cpu", torch.float64)
    assert torch.autograd.gradcheck(lambda t: opkiln.roi_pool(t, rois, (3, 4), rest[0]), (x.requires_grad_(True),))


@pytest.mark.parametrize("device", DEVICES)
def test_double_backward_raises(device: str) -> None:
    # The output gradient itself requires grad, so the backward op is recorded and its own
    # autograd formula (the guard) is what a second backward reaches.
    x, *rest = sample_args(device, torch.float64)
    x.requires_grad_(True)
    out, _ = torch.ops.opkiln.roi_pool(x, *rest)
    (grad_x,) = torch.autograd.grad(out, x, torch.ones_like(out, requires_grad=True), create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        grad_x.sum().backward()


def test_python_api_takes_torchvisions_forms() -> None:
    x, rois, scale, *_ = sample_args("cpu", torch.float32)
    want = opkiln.roi_pool(x, rois, (3, 4), scale)
    assert torch.equal(want, torch.ops.opkiln.roi_pool(x, rois, scale, 3, 4)[0])
    per_image = [rois[rois[:, 0] == b, 1:] for b in range(2)]
    order = torch.cat([(rois[:, 0] == b).nonzero().flatten() for b in range(2)])
    assert torch.equal(opkiln.roi_pool(x, per_image, [3, 4], scale), want[order])
    assert torch.equal(opkiln.RoIPool((3, 4), scale)(x, rois), want)
    assert torch.equal(opkiln.roi_pool(x, rois, 3, scale), opkiln.roi_pool(x, rois, (3, 3), scale))
    assert repr(opkiln.RoIPool(2, 0.5)) == "RoIPool(output_size=2, spatial_scale=0.5)"


def test_autocast_runs_in_float32_and_casts_back() -> None:
    x, rois, scale, *_ = sample_args("cpu", torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = opkiln.roi_pool(x, rois, (3, 4), scale)
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, opkiln.roi_pool(x.float(), rois.float(), (3, 4), scale).to(torch.bfloat16))


_X = torch.zeros(2, 3, 4, 4)
_ROIS = torch.tensor([[0.0, 0, 0, 2, 2], [1, 1, 1, 3, 3]])


@pytest.mark.parametrize(("x", "rois", "pooled", "error", "match"), [
    (_X, torch.tensor([[0.0, 0, 0, 2, 2], [5, 1, 1, 3, 3]]), (2, 2), ValueError,
     r"opkiln::roi_pool: rois\[1, 0\] = 5 is a batch index out of range \[0, 2\)"),
    (_X, torch.tensor([[float("nan"), 0, 0, 2, 2]]), (2, 2), ValueError, r"rois\[0, 0\] = nan is a batch index"),
    (_X, _ROIS[:, :4], (2, 2), RuntimeError, r"rois must have shape \[K, 5\] \(batch index, x1, y1, x2, y2\)"),
    (_X[0], _ROIS, (2, 2), RuntimeError, r"input must have shape \[N, C, H, W\], got \[3, 4, 4\]"),
    (_X, _ROIS, (-1, 2), ValueError, "pooled_height and pooled_width must be >= 0, got -1 and 2"),
    (_X, _ROIS.double(), (2, 2), RuntimeError, "cast one of them"),
    (_X.long(), _ROIS.long(), (2, 2), RuntimeError, "must be float32, float64, float16 or bfloat16"),
])
def test_bad_arguments_raise(x: Tensor, rois: Tensor, pooled: tuple[int, int], error: type[Exception],
                             match: str) -> None:
    with pytest.raises(error, match=match):
        torch.ops.opkiln.roi_pool(x, rois, 1.0, *pooled)


def test_backward_refuses_a_bad_argmax() -> None:
    grad = torch.ones(2, 3, 2, 2)
    with pytest.raises(RuntimeError, match=r"argmax must be int32 of grad's shape \[2, 3, 2, 2\]"):
        torch.ops.opkiln._roi_pool_backward(grad, _ROIS, torch.zeros(2, 3, 2, 2), 1.0, 2, 2, 2, 3, 4, 4)
    # An index outside the plane (only a hand-made argmax has one) adds nothing, never out of bounds.
    argmax = torch.full((2, 3, 2, 2), 16, dtype=torch.int32)
    assert not torch.ops.opkiln._roi_pool_backward(grad, _ROIS, argmax, 1.0, 2, 2, 2, 3, 4, 4).any()


@pytest.mark.parametrize("device", [CUDA])
def test_cuda_mixed_devices_and_bad_batch_index_raise(device: str) -> None:
    with pytest.raises(RuntimeError, match="same device"):
        torch.ops.opkiln.roi_pool(_X.to(device), _ROIS, 1.0, 2, 2)
    with pytest.raises(ValueError, match=r"rois\[1, 0\] = 3.* out of range \[0, 2\)"):
        torch.ops.opkiln.roi_pool(_X.to(device), torch.tensor([[0.0, 0, 0, 2, 2], [3, 1, 1, 3, 3]], device=device),
                                  1.0, 2, 2)


@pytest.mark.parametrize("device", [CUDA])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_cuda_matches_cpu_on_larger_inputs(device: str, dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(7)
    x = torch.randn(3, 16, 40, 50, generator=g).to(dtype)
    rois = random_rois(300, 3, 40, 50, dtype, seed=8, spatial_scale=0.25)
    cpu = torch.ops.opkiln.roi_pool(x, rois, 0.25, 7, 7)
    gpu = torch.ops.opkiln.roi_pool(x.to(device), rois.to(device), 0.25, 7, 7)
    assert torch.equal(gpu[0].cpu(), cpu[0]) and torch.equal(gpu[1].cpu(), cpu[1])
    grad = torch.randn(cpu[0].shape, generator=g).to(dtype)
    want = torch.ops.opkiln._roi_pool_backward(grad, rois, cpu[1], 0.25, 7, 7, 3, 16, 40, 50)
    got = torch.ops.opkiln._roi_pool_backward(grad.to(device), rois.to(device), gpu[1], 0.25, 7, 7, 3, 16, 40, 50)
    torch.testing.assert_close(got.cpu(), want, **TOL[dtype])
