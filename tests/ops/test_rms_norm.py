"""opkiln.rms_norm: fused forward/backward against a pure-PyTorch reference."""

from __future__ import annotations

import pytest
import torch

import opkiln
from support.ops_reference import DEVICES, FLOAT_DTYPES, HAS_CUDA, TOL, rms_norm_grads_ref, rms_norm_ref

# What tests/wheels/test_wheel_install.py runs in a fresh venv after `pip install` of each wheel
# (op name -> a Python expression over torch and opkiln).
INSTALL_SAMPLES = {"rms_norm": "opkiln.rms_norm(torch.randn(4, 8), torch.ones(8), 1e-6)"}

EPS = 1e-6
SHAPES = [(1, 1), (0, 16), (4, 0), (3, 7), (2, 3, 257), (5, 1000), (3, 4099), (2, 8192), (1, 20000), (70000,)]


def _inputs(shape: tuple[int, ...], dtype: torch.dtype, device: str, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float64).to(device, dtype)
    w = (1.0 + 0.5 * torch.randn(shape[-1], generator=g, dtype=torch.float64)).to(device, dtype)
    return x, w


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_forward_matches_reference(device: str, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    x, w = _inputs(shape, dtype, device)
    y = opkiln.rms_norm(x, w, EPS)
    assert y.shape == x.shape and y.dtype == dtype and y.device == x.device and y.is_contiguous()
    torch.testing.assert_close(y, rms_norm_ref(x, w, EPS), **TOL[dtype])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(1, 1), (0, 16), (3, 7), (2, 3, 257), (3, 4099), (2, 8192), (1, 20000)], ids=str)
def test_backward_matches_reference(device: str, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    x, w = _inputs(shape, dtype, device, seed=1)
    grad = torch.randn(shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64).to(device, dtype)
    dx, dw = torch.ops.opkiln._rms_norm_backward(grad, x, w, torch.ops.opkiln._rms_norm_forward(x, w, EPS)[1])
    dx_ref, dw_ref = rms_norm_grads_ref(x, w, EPS, grad)
    tol = TOL[dtype]
    torch.testing.assert_close(dx, dx_ref, **tol)
    # dw sums over rows: allow for the summation order.
    rows = max(1, x.numel() // max(1, x.shape[-1]))
    torch.testing.assert_close(dw, dw_ref, atol=tol["atol"] * rows, rtol=tol["rtol"] * 4)


@pytest.mark.parametrize("device", DEVICES)
def test_rstd_is_returned_in_accumulation_dtype(device: str) -> None:
    x, w = _inputs((3, 5, 64), torch.bfloat16, device)
    y, rstd = torch.ops.opkiln._rms_norm_forward(x, w, 0.5)
    torch.testing.assert_close(y, rms_norm_ref(x, w, 0.5), **TOL[torch.bfloat16])
    assert rstd.shape == (3, 5) and rstd.dtype == torch.float32
    expected = torch.rsqrt(x.float().pow(2).mean(-1) + 0.5)
    torch.testing.assert_close(rstd, expected, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_non_contiguous_and_offset_inputs(device: str, dtype: torch.dtype) -> None:
    base, wbase = _inputs((64, 2 * 1030 + 1), dtype, device, seed=3)
    x = base[1::2, 1::2]  # strided rows and columns, odd offset
    w = wbase[1::2]
    assert not x.is_contiguous() and not w.is_contiguous()
    torch.testing.assert_close(opkiln.rms_norm(x, w, EPS), rms_norm_ref(x, w, EPS), **TOL[dtype])
    xt = base[:, :64].t()  # transposed
    torch.testing.assert_close(opkiln.rms_norm(xt, wbase[:64], EPS), rms_norm_ref(xt, wbase[:64], EPS), **TOL[dtype])
    # Contiguous but starting one element in: not 16-byte aligned.
    flat = base.reshape(-1)[1 : 1 + 8 * 512].view(8, 512)
    torch.testing.assert_close(opkiln.rms_norm(flat, wbase[1:513], EPS), rms_norm_ref(flat, wbase[1:513], EPS),
                               **TOL[dtype])


@pytest.mark.parametrize("device", DEVICES)
def test_autograd_matches_reference_on_non_contiguous_grad(device: str) -> None:
    x, w = _inputs((4, 6, 33), torch.float32, device, seed=4)
    x.requires_grad_(True)
    w.requires_grad_(True)
    y = opkiln.rms_norm(x, w, EPS)
    # sum() hands backward an expanded (stride 0) gradient.
    (y.sum() + (y[:, ::2] * 3).sum()).backward()
    xr = x.detach().clone().requires_grad_(True)
    wr = w.detach().clone().requires_grad_(True)
    yr = rms_norm_ref(xr, wr, EPS)
    (yr.sum() + (yr[:, ::2] * 3).sum()).backward()
    torch.testing.assert_close(x.grad, xr.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(w.grad, wr.grad, atol=1e-4, rtol=1e-5)


def test_gradcheck_float64() -> None:
    x, w = _inputs((3, 4, 9), torch.float64, "cpu", seed=5)
    x.requires_grad_(True)
    w.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, b: opkiln.rms_norm(a, b, 1e-5), (x, w))
    # Only one input needing a gradient.
    assert torch.autograd.gradcheck(lambda a: opkiln.rms_norm(a, w.detach(), 1e-5), (x,))
    assert torch.autograd.gradcheck(lambda b: opkiln.rms_norm(x.detach(), b, 1e-5), (w,))


def test_double_backward_raises() -> None:
    x, w = _inputs((3, 8), torch.float64, "cpu", seed=14)
    x.requires_grad_(True)
    (gx,) = torch.autograd.grad(opkiln.rms_norm(x, w, EPS).square().sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        gx.sum().backward()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("requires_grad", [False, True])
def test_opcheck(device: str, requires_grad: bool) -> None:
    for shape in [(3, 8), (2, 3, 17)]:
        x, w = _inputs(shape, torch.float32, device, seed=6)
        x.requires_grad_(requires_grad)
        w.requires_grad_(requires_grad)
        torch.library.opcheck(torch.ops.opkiln._rms_norm_forward.default, (x, w, EPS))
        torch.library.opcheck(torch.ops.opkiln.rms_norm.default, (x, w, EPS))
        rstd = torch.ops.opkiln._rms_norm_forward(x.detach(), w.detach(), EPS)[1]
        torch.library.opcheck(torch.ops.opkiln._rms_norm_backward.default,
                              (torch.randn_like(x.detach()), x.detach(), w.detach(), rstd))


def test_torch_compile_fullgraph_forward_and_backward() -> None:
    x, w = _inputs((4, 33), torch.float32, "cpu", seed=7)
    x.requires_grad_(True)
    w.requires_grad_(True)

    @torch.compile(fullgraph=True, backend="aot_eager")
    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return opkiln.rms_norm(a * 2.0, b, EPS).sum(-1)

    out = f(x, w)
    out.sum().backward()
    xr = x.detach().clone().requires_grad_(True)
    wr = w.detach().clone().requires_grad_(True)
    rms_norm_ref(xr * 2.0, wr, EPS).sum(-1).sum().backward()
    torch.testing.assert_close(out, rms_norm_ref(x * 2.0, w, EPS).sum(-1))
    torch.testing.assert_close(x.grad, xr.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(w.grad, wr.grad, atol=1e-5, rtol=1e-5)


def test_torch_compile_inductor_fullgraph() -> None:
    x, w = _inputs((4, 33), torch.float32, "cpu", seed=8)
    compiled = torch.compile(lambda a, b: opkiln.rms_norm(a, b, EPS) + 1.0, fullgraph=True)
    torch.testing.assert_close(compiled(x, w), rms_norm_ref(x, w, EPS) + 1.0)


@pytest.mark.parametrize(
    ("x", "w", "eps", "error", "match"),
    [
        (torch.randn(3, 4), torch.randn(5), EPS, RuntimeError, "weight must be 1-D"),
        (torch.randn(3, 4), torch.randn(2, 2), EPS, RuntimeError, "weight must be 1-D"),
        (torch.randn(3, 4), torch.randn(4, dtype=torch.float64), EPS, RuntimeError, "cast one of them"),
        (torch.ones(3, 4, dtype=torch.int32), torch.ones(4, dtype=torch.int32), EPS, RuntimeError, "must be float32"),
        (torch.tensor(1.0), torch.randn(1), EPS, RuntimeError, "at least one dimension"),
        (torch.randn(3, 4), torch.randn(4), -1.0, ValueError, "eps must be"),
        (torch.randn(3, 4), torch.randn(4), float("nan"), ValueError, "eps must be"),
    ],
)
def test_bad_arguments_raise(x: torch.Tensor, w: torch.Tensor, eps: float, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        opkiln.rms_norm(x, w, eps)


def test_backward_bad_arguments_raise() -> None:
    x, w = torch.randn(3, 4), torch.randn(4)
    rstd = torch.ops.opkiln._rms_norm_forward(x, w, EPS)[1]
    with pytest.raises(RuntimeError, match="grad must have the shape"):
        torch.ops.opkiln._rms_norm_backward(torch.randn(3, 5), x, w, rstd)
    with pytest.raises(RuntimeError, match="rstd must have shape"):
        torch.ops.opkiln._rms_norm_backward(torch.randn(3, 4), x, w, rstd[:2])
    with pytest.raises(RuntimeError, match="rstd must be"):
        torch.ops.opkiln._rms_norm_backward(torch.randn(3, 4), x, w, rstd.double())


# ---------------------------------------------------------------------------- CUDA only


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_cuda_mixed_devices_raise() -> None:
    x, w = torch.randn(3, 4, device="cuda"), torch.randn(4)
    with pytest.raises(RuntimeError, match="same device"):
        opkiln.rms_norm(x, w, EPS)


# Kernel paths (ops/rms_norm/rms_norm_cuda.cu), P = 16 bytes / element size:
#   forward "cached" (row held in registers) needs cols % P == 0 and cols / P <= 4096; "looped" here:
#     (3, 4099), (2, 65536), (1, 70000) for every dtype, and (2, 16384) for fp64;
#   backward "cached" needs cols / P <= 2048; "looped" (zeroed dw workspace) here: (3, 4099) and
#     cols > 8192 for fp32, > 16384 for fp16/bf16, > 4096 for fp64.
# A failure confined to one of these groups points at that kernel.
@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(1, 64), (17, 96), (5, 1000), (8, 2048), (3, 4099), (4, 8192), (2, 16384),
                                   (2, 65536), (1, 70000), (600, 8192)], ids=str)
def test_cuda_matches_cpu_forward_and_backward(dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    x, w = _inputs(shape, dtype, "cpu", seed=9)
    grad = torch.randn(shape, generator=torch.Generator().manual_seed(10), dtype=torch.float64).to(dtype)
    y_cpu, rstd_cpu = torch.ops.opkiln._rms_norm_forward(x, w, EPS)
    y_gpu, rstd_gpu = torch.ops.opkiln._rms_norm_forward(x.cuda(), w.cuda(), EPS)
    tol = TOL[dtype]
    torch.testing.assert_close(rstd_gpu.cpu(), rstd_cpu, atol=1e-5, rtol=1e-5 if dtype != torch.float64 else 1e-12)
    torch.testing.assert_close(y_gpu.cpu(), y_cpu, **tol)
    dx_cpu, dw_cpu = torch.ops.opkiln._rms_norm_backward(grad, x, w, rstd_cpu)
    dx_gpu, dw_gpu = torch.ops.opkiln._rms_norm_backward(grad.cuda(), x.cuda(), w.cuda(), rstd_gpu)
    torch.testing.assert_close(dx_gpu.cpu(), dx_cpu, **tol)
    torch.testing.assert_close(dw_gpu.cpu(), dw_cpu, atol=tol["atol"] * shape[0], rtol=tol["rtol"] * 4)
    dx_ref, dw_ref = rms_norm_grads_ref(x, w, EPS, grad)
    torch.testing.assert_close(dx_gpu.cpu(), dx_ref, **tol)
    torch.testing.assert_close(dw_gpu.cpu(), dw_ref, atol=tol["atol"] * shape[0], rtol=tol["rtol"] * 4)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_cuda_many_rows_uses_all_parts_of_dw_reduction() -> None:
    # More rows than resident blocks: each block handles several rows.
    x, w = _inputs((20000, 256), torch.float32, "cuda", seed=11)
    grad = torch.randn_like(x)
    y, rstd = torch.ops.opkiln._rms_norm_forward(x, w, EPS)
    torch.testing.assert_close(y, rms_norm_ref(x, w, EPS), **TOL[torch.float32])
    dx, dw = torch.ops.opkiln._rms_norm_backward(grad, x, w, rstd)
    dx_ref, dw_ref = rms_norm_grads_ref(x.double(), w.double(), EPS, grad.double())
    torch.testing.assert_close(dx, dx_ref.float(), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(dw, dw_ref.float(), atol=1e-2, rtol=1e-4)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_cuda_runs_on_the_current_stream() -> None:
    x, w = _inputs((512, 4096), torch.bfloat16, "cuda", seed=12)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        y = opkiln.rms_norm(x, w, EPS)
        s = y.float().sum()  # queued behind the kernel on the same stream
    stream.synchronize()
    torch.testing.assert_close(y, rms_norm_ref(x, w, EPS), **TOL[torch.bfloat16])
    torch.testing.assert_close(s, y.float().sum())


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_cuda_autograd_and_compile() -> None:
    x, w = _inputs((64, 320), torch.float32, "cuda", seed=13)
    x.requires_grad_(True)
    w.requires_grad_(True)
    f = torch.compile(lambda a, b: opkiln.rms_norm(a, b, EPS), fullgraph=True)
    f(x, w).square().sum().backward()
    xr = x.detach().clone().requires_grad_(True)
    wr = w.detach().clone().requires_grad_(True)
    rms_norm_ref(xr, wr, EPS).square().sum().backward()
    torch.testing.assert_close(x.grad, xr.grad, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(w.grad, wr.grad, atol=1e-3, rtol=1e-4)

