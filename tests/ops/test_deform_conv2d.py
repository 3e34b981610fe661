"""opkiln.deform_conv2d / DeformConv2d: torchvision's deformable convolution, checked against a
pure-PyTorch reference (tests/support/deform_conv2d_reference.py) and, where it is importable,
torchvision itself (0.28 beside torch 2.13; 0.29.1 in the bench venv)."""

from __future__ import annotations

import inspect
import warnings
from types import ModuleType
from typing import Any

import pytest
import torch

import opkiln
from opkiln import ops
from support.deform_conv2d_reference import CASES, deform_conv2d_ref, random_args, run_with_grads
from support.ops_reference import DEVICES, TOL

# What tests/wheels/test_wheel_install.py and the release rehearsal run in a fresh venv after `pip install` of
# each wheel (op name -> a Python expression over torch and opkiln).
INSTALL_SAMPLES = {"deform_conv2d": "opkiln.deform_conv2d(torch.arange(32.).reshape(1, 2, 4, 4),"
                                    " torch.full((1, 18, 2, 2), 0.25), torch.ones(3, 2, 3, 3))",
                   "DeformConv2d": "opkiln.DeformConv2d(2, 3, 3, bias=False)(torch.arange(32.).reshape(1, 2, 4, 4),"
                                   " torch.zeros(1, 18, 2, 2))"}

def _tv() -> ModuleType:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tv_ops: ModuleType = pytest.importorskip("torchvision.ops")
    return tv_ops




@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("use_mask", [True, False])
@pytest.mark.parametrize("use_bias", [True, False])
def test_forward_and_gradients_match_reference(device: str, case: tuple[Any, ...], use_mask: bool,
                                               use_bias: bool) -> None:
    a = random_args(*case, device=device)
    out, grads = run_with_grads(ops.deform_conv2d, a, use_mask, use_bias)
    expected, expected_grads = run_with_grads(deform_conv2d_ref, a, use_mask, use_bias)
    torch.testing.assert_close(out, expected, **TOL[torch.float64])
    for got, want in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_dtypes(dtype: torch.dtype) -> None:
    a = random_args(*CASES[1], dtype=dtype, seed=3)
    out = ops.deform_conv2d(a["input"], a["offset"], a["weight"], a["bias"], padding=1, mask=a["mask"])
    assert out.dtype == dtype
    wide = {k: v.double() if isinstance(v, torch.Tensor) else v for k, v in a.items()}
    expected = deform_conv2d_ref(wide["input"], wide["offset"], wide["weight"], wide["bias"], padding=1,
                                 mask=wide["mask"])
    tol = {torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 1.5e-1}[dtype]
    torch.testing.assert_close(out.double(), expected, rtol=tol, atol=tol)


def test_gradcheck_every_input() -> None:
    a = random_args(*CASES[0])
    ts = [a[k].requires_grad_(True) for k in ("input", "offset", "weight", "bias", "mask")]

    def f(x: torch.Tensor, off: torch.Tensor, w: torch.Tensor, b: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        return ops.deform_conv2d(x, off, w, b, stride=(2, 1), padding=(1, 0), dilation=(2, 1), mask=m)

    assert torch.autograd.gradcheck(f, ts, fast_mode=True)


def test_blocks_of_images_match_reference() -> None:
    # 16 channels x 9 taps x 128 x 128 positions: over the binding's column budget, one image a block
    # (the weight's gradient sums over the blocks).
    a = random_args(3, 16, 128, 128, 4, (3, 3), 1, 1, 1, 1, 1, seed=5)
    out, grads = run_with_grads(ops.deform_conv2d, a, True, True)
    expected, expected_grads = run_with_grads(deform_conv2d_ref, a, True, True)
    torch.testing.assert_close(out, expected, **TOL[torch.float64])
    for got, want in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


def test_non_contiguous_inputs() -> None:
    a = random_args(*CASES[0])
    x = a["input"].permute(0, 1, 3, 2).contiguous().permute(0, 1, 3, 2)
    off = a["offset"].permute(1, 3, 0, 2).contiguous().permute(2, 0, 3, 1)
    w = a["weight"].permute(3, 2, 0, 1).contiguous().permute(2, 3, 1, 0)
    assert not (x.is_contiguous() or off.is_contiguous() or w.is_contiguous())
    kw = {"stride": (2, 1), "padding": (1, 0), "dilation": (2, 1), "mask": a["mask"]}
    torch.testing.assert_close(ops.deform_conv2d(x, off, w, a["bias"], **kw),
                               deform_conv2d_ref(a["input"], a["offset"], a["weight"], a["bias"], **kw))


def test_empty_batch() -> None:
    a = random_args(0, 6, 5, 4, 2, (3, 2), 2, 3, (2, 1), (1, 0), (2, 1))
    out, grads = run_with_grads(ops.deform_conv2d, a, True, True)
    assert out.shape == (0, 2, 2, 3)
    assert [tuple(g.shape) for g in grads] == [(0, 6, 5, 4), (0, 36, 2, 3), (2, 3, 3, 2), (2,), (0, 18, 2, 3)]
    assert all(int(g.count_nonzero()) == 0 for g in grads)


def test_offsets_far_outside_read_zero() -> None:
    a = random_args(*CASES[1])
    far = torch.full_like(a["offset"], 1e6)
    out = ops.deform_conv2d(a["input"], far, a["weight"], a["bias"], padding=1)
    torch.testing.assert_close(out, a["bias"].reshape(1, -1, 1, 1).expand_as(out))


def test_infinite_input_outside_the_taps_stays_out() -> None:
    # Every position samples at (2.5, 2.5) of a 3 x 3 plane: three of its taps are outside and read 0,
    # not 0 * (the infinite value at [0, 0]); the fourth reads 0.
    x = torch.zeros(1, 1, 3, 3, dtype=torch.float64)
    x[0, 0, 0, 0] = float("inf")
    pos = torch.arange(3, dtype=torch.float64)
    off = torch.stack([(2.5 - pos)[:, None].expand(3, 3), (2.5 - pos)[None, :].expand(3, 3)])[None]
    out = ops.deform_conv2d(x, off, torch.ones(1, 1, 1, 1, dtype=torch.float64))
    assert torch.equal(out, torch.zeros(1, 1, 3, 3, dtype=torch.float64))


# ---------------------------------------------------------------------------- errors


@pytest.fixture
def layer_args() -> dict[str, Any]:
    return random_args(*CASES[0])


def test_offset_of_a_wrong_shape_is_torchvisions_runtime_error(layer_args: dict[str, Any]) -> None:
    a = layer_args
    with pytest.raises(RuntimeError, match="the shape of the offset"):
        ops.deform_conv2d(a["input"], a["offset"][:, :2], a["weight"], stride=(2, 1), padding=(1, 0),
                          dilation=(2, 1))
    with pytest.raises(RuntimeError, match=r"offset.shape\[1\] is not valid: got: 30 expected: 24"):
        ops.deform_conv2d(a["input"], a["offset"][:, :30], a["weight"], stride=(2, 1), padding=(1, 0),
                          dilation=(2, 1))
    with pytest.raises(RuntimeError, match=r"mask.shape\[1\] is not valid"):
        ops.deform_conv2d(a["input"], a["offset"], a["weight"], stride=(2, 1), padding=(1, 0), dilation=(2, 1),
                          mask=a["mask"][:, :2])
    with pytest.raises(RuntimeError, match=r"offset output dims: \(2, 3\) - computed output dims: \(5, 3\)"):
        ops.deform_conv2d(a["input"], a["offset"], a["weight"], padding=(1, 0))
    with pytest.raises(RuntimeError, match="Calculated output size too small"):
        ops.deform_conv2d(a["input"][:, :, :1], a["offset"][:, :, :0], a["weight"], stride=(2, 1), padding=(1, 0),
                          dilation=(2, 1))


@pytest.mark.parametrize("what", ["dtype", "batch", "bias", "stride", "dims"])
def test_bad_arguments_are_runtime_errors(layer_args: dict[str, Any], what: str) -> None:
    a = layer_args
    kw: dict[str, Any] = {"stride": (2, 1), "padding": (1, 0), "dilation": (2, 1), "mask": a["mask"]}
    x, off, w, b = a["input"], a["offset"], a["weight"], a["bias"]
    match = {"dtype": "cast one of them", "batch": "invalid batch size of offset", "bias": "bias must have shape",
             "stride": "strides must be positive", "dims": "must have 4 dimensions"}[what]
    if what == "dtype":
        w = w.float()
    elif what == "batch":
        off, kw["mask"] = off[:1], kw["mask"][:1]
    elif what == "bias":
        b = b[:1]
    elif what == "stride":
        kw["stride"] = (0, 1)
    else:
        w = w[0]
    with pytest.raises(RuntimeError, match=match):
        ops.deform_conv2d(x, off, w, b, **kw)


# ---------------------------------------------------------------------------- the torchvision API


def test_signatures_and_layer() -> None:
    params = [(p.name, p.default) for p in inspect.signature(ops.deform_conv2d).parameters.values()]
    assert params == [("input", inspect.Parameter.empty), ("offset", inspect.Parameter.empty),
                      ("weight", inspect.Parameter.empty), ("bias", None), ("stride", (1, 1)), ("padding", (0, 0)),
                      ("dilation", (1, 1)), ("mask", None)]
    assert opkiln.deform_conv2d is ops.deform_conv2d and opkiln.DeformConv2d is ops.DeformConv2d
    layer = ops.DeformConv2d(4, 6, 3, stride=2, padding=1, groups=2, bias=False)
    assert layer.weight.shape == (6, 2, 3, 3) and layer.bias is None
    assert repr(layer) == "DeformConv2d(4, 6, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), groups=2, bias=False)"
    with pytest.raises(ValueError, match="in_channels must be divisible by groups"):
        ops.DeformConv2d(5, 6, 3, groups=2)


def test_signatures_equal_torchvisions() -> None:
    tv = _tv()
    assert inspect.signature(ops.deform_conv2d) == inspect.signature(tv.deform_conv2d)
    for name in ("__init__", "forward", "reset_parameters"):
        assert inspect.signature(getattr(ops.DeformConv2d, name)) == inspect.signature(getattr(tv.DeformConv2d, name))


@pytest.mark.parametrize("case", CASES, ids=str)
def test_matches_torchvision(case: tuple[Any, ...]) -> None:
    tv = _tv()
    a = random_args(*case, seed=11)
    out, grads = run_with_grads(ops.deform_conv2d, a, True, True)
    expected, expected_grads = run_with_grads(tv.deform_conv2d, a, True, True)
    torch.testing.assert_close(out, expected)
    for got, want in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(got, want)


def test_layer_state_dict_loads_into_torchvisions() -> None:
    tv = _tv()
    torch.manual_seed(0)
    ours = ops.DeformConv2d(4, 6, 3, padding=1)
    theirs = tv.DeformConv2d(4, 6, 3, padding=1)
    theirs.load_state_dict(ours.state_dict())
    a = random_args(1, 4, 7, 6, 6, (3, 3), 1, 1, 1, 1, 1, dtype=torch.float32)
    torch.testing.assert_close(ours(a["input"], a["offset"], a["mask"]), theirs(a["input"], a["offset"], a["mask"]))


def test_torchscript_and_fx() -> None:
    layer = ops.DeformConv2d(4, 6, 3, padding=1).double()
    a = random_args(*CASES[1])
    scripted = torch.jit.script(layer)
    torch.testing.assert_close(scripted(a["input"], a["offset"], a["mask"]), layer(a["input"], a["offset"], a["mask"]))

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(6, 4, 3, 3, dtype=torch.float64))

        def forward(self, x: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
            return ops.deform_conv2d(x, offset, self.weight, padding=1)

    traced = torch.fx.symbolic_trace(Model())
    calls = [n for n in traced.graph.nodes if n.op == "call_function"]
    assert [n.target for n in calls] == [ops.deform_conv2d]  # a leaf, as opkiln's other functional ops
    torch.testing.assert_close(traced(a["input"], a["offset"]), Model.forward(traced, a["input"], a["offset"]))


def test_autocast_runs_in_float32_and_returns_inputs_dtype() -> None:
    a = random_args(*CASES[1], dtype=torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = ops.deform_conv2d(a["input"], a["offset"], a["weight"], a["bias"], padding=1, mask=a["mask"])
    assert out.dtype == torch.bfloat16
    f32 = {k: v.float() if isinstance(v, torch.Tensor) else v for k, v in a.items()}
    expected = ops.deform_conv2d(f32["input"], f32["offset"], f32["weight"], f32["bias"], padding=1, mask=f32["mask"])
    torch.testing.assert_close(out, expected.to(torch.bfloat16))


@pytest.mark.parametrize("use_mask", [True, False])
def test_opcheck(use_mask: bool) -> None:
    a = random_args(*CASES[0])
    x, off, w, b, m = (a[k].requires_grad_(True) for k in ("input", "offset", "weight", "bias", "mask"))
    mask = m if use_mask else torch.zeros(2, 0, dtype=torch.float64)
    args = (x, w, off, mask, b, 2, 1, 1, 0, 2, 1, 2, 3, use_mask)
    torch.library.opcheck(torch.ops.opkiln.deform_conv2d.default, args)


def test_double_backward_raises() -> None:
    a = random_args(*CASES[1])
    x = a["input"].requires_grad_(True)
    out = ops.deform_conv2d(x, a["offset"], a["weight"], padding=1)
    (g,) = torch.autograd.grad(out.sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        g.sum().backward()
