"""opkiln.weighted_sum: alpha * a + (1 - alpha) * b against a pure-PyTorch reference."""

from __future__ import annotations

import pytest
import torch

import opkiln
from support.ops_reference import DEVICES, FLOAT_DTYPES, HAS_CUDA, TOL, weighted_sum_ref

# What tests/wheels/test_wheel_install.py runs in a fresh venv after `pip install` of each wheel
# (op name -> a Python expression over torch and opkiln).
INSTALL_SAMPLES = {"weighted_sum": "opkiln.weighted_sum(torch.ones(5), torch.zeros(5), 0.25)"}

SHAPES = [(), (0,), (1,), (7,), (3, 0, 2), (4, 5), (2, 3, 1001), (1_000_003,)]


def _pair(shape: tuple[int, ...], dtype: torch.dtype, device: str, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(shape, generator=g, dtype=torch.float64).to(device, dtype)
    b = torch.randn(shape, generator=g, dtype=torch.float64).to(device, dtype)
    return a, b


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_matches_reference(device: str, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    a, b = _pair(shape, dtype, device)
    for alpha in (0.3, 0.0, 1.0, -2.5):
        out = opkiln.weighted_sum(a, b, alpha)
        assert out.shape == a.shape and out.dtype == dtype and out.device == a.device and out.is_contiguous()
        torch.testing.assert_close(out, weighted_sum_ref(a, b, alpha), **TOL[dtype])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_non_contiguous_and_unaligned(device: str, dtype: torch.dtype) -> None:
    a, b = _pair((64, 130), dtype, device, seed=1)
    for x, y in [(a.t(), b.t()), (a[:, 1::3], b[:, ::3][:, :43]), (a.reshape(-1)[1:4097], b.reshape(-1)[3:4099]),
                 (a.t(), b.t().contiguous())]:
        assert x.shape == y.shape
        torch.testing.assert_close(opkiln.weighted_sum(x, y, 0.25), weighted_sum_ref(x, y, 0.25), **TOL[dtype])


def test_gradcheck_float64() -> None:
    a, b = _pair((3, 5), torch.float64, "cpu", seed=2)
    a.requires_grad_(True)
    b.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x, y: opkiln.weighted_sum(x, y, 0.3), (a, b))
    assert torch.autograd.gradgradcheck(lambda x, y: opkiln.weighted_sum(x, y, 0.3), (a, b))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("requires_grad", [False, True])
def test_opcheck(device: str, requires_grad: bool) -> None:
    for shape in [(5,), (3, 4), (0, 2)]:
        a, b = _pair(shape, torch.float32, device, seed=3)
        a.requires_grad_(requires_grad)
        b.requires_grad_(requires_grad)
        torch.library.opcheck(torch.ops.opkiln.weighted_sum.default, (a, b, 0.7))


def test_torch_compile_fullgraph() -> None:
    a, b = _pair((4, 7), torch.float32, "cpu", seed=4)
    a.requires_grad_(True)
    f = torch.compile(lambda x, y: opkiln.weighted_sum(x.sin(), y, 0.25) * 2, fullgraph=True, backend="aot_eager")
    out = f(a, b)
    out.sum().backward()
    torch.testing.assert_close(out, weighted_sum_ref(a.sin(), b, 0.25) * 2)
    torch.testing.assert_close(a.grad, 0.5 * a.detach().cos())


@pytest.mark.parametrize(
    ("a", "b", "error", "match"),
    [
        (torch.zeros(3), torch.zeros(4), RuntimeError, "same shape"),
        (torch.zeros(3), torch.zeros(3, dtype=torch.float64), RuntimeError, "cast one of them"),
        (torch.zeros(3, dtype=torch.int32), torch.zeros(3, dtype=torch.int32), RuntimeError, "must be float32"),
    ],
)
def test_bad_arguments_raise(a: torch.Tensor, b: torch.Tensor, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        opkiln.weighted_sum(a, b, 0.5)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_cuda_mixed_devices_raise() -> None:
    with pytest.raises(RuntimeError, match="same device"):
        opkiln.weighted_sum(torch.zeros(3, device="cuda"), torch.zeros(3), 0.5)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_cuda_matches_cpu_large_odd(dtype: torch.dtype) -> None:
    a, b = _pair((2**24 + 13,), dtype, "cpu", seed=5)
    out = opkiln.weighted_sum(a.cuda(), b.cuda(), 0.37)
    torch.testing.assert_close(out.cpu(), opkiln.weighted_sum(a, b, 0.37), **TOL[dtype])
    # Unaligned views take the scalar tail path for the whole tensor.
    out = opkiln.weighted_sum(a.cuda()[1:], b.cuda()[:-1], 0.37)
    torch.testing.assert_close(out.cpu(), weighted_sum_ref(a[1:], b[:-1], 0.37), **TOL[dtype])


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_cuda_runs_on_the_current_stream() -> None:
    a, b = _pair((1 << 22,), torch.float32, "cuda", seed=6)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        out = opkiln.weighted_sum(a, b, 0.5)
        total = out.sum()
    stream.synchronize()
    torch.testing.assert_close(out, weighted_sum_ref(a, b, 0.5))
    torch.testing.assert_close(total, out.sum())
