"""opkiln's detection ops as a drop-in for torchvision.ops: signatures, input forms, autocast,
edge cases, error types; against torchvision itself where it is importable.

Runs in every venv that runs tests/ops; tests/stable/test_torchvision_parity.py runs it
against both wheels (per-torch and stable ABI) beside the real torchvision 0.29.1, where the
torchvision comparisons below do not skip.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
import torch

import opkiln
from opkiln import ops
from support.ops_reference import HAS_CUDA, TOL, random_boxes
from support.roi_align_reference import random_rois

_X = torch.randn(2, 3, 10, 12, generator=torch.Generator().manual_seed(0))
_ROIS = random_rois(6, 2, 10, 12, torch.float32, seed=1)


def _tv() -> ModuleType:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tv_ops: ModuleType = pytest.importorskip("torchvision.ops")
    return tv_ops


def _outcome(f: Callable[[], Any]) -> tuple[str, Any]:
    """("ok", result) or (exception type name, None): what a user sees of one call."""
    try:
        return "ok", f()
    except Exception as exc:  # the type is what is compared
        return type(exc).__name__, None


# ---------------------------------------------------------------------------- signatures


def test_signatures_are_torchvisions() -> None:
    def params(f: Callable[..., Any]) -> list[tuple[str, Any]]:
        return [(p.name, p.default) for p in inspect.signature(f).parameters.values()]

    assert params(ops.roi_align) == [("input", inspect.Parameter.empty), ("boxes", inspect.Parameter.empty),
                                     ("output_size", inspect.Parameter.empty), ("spatial_scale", 1.0),
                                     ("sampling_ratio", -1), ("aligned", False)]
    assert [n for n, _ in params(ops.nms)] == ["boxes", "scores", "iou_threshold"]
    assert [n for n, _ in params(ops.batched_nms)] == ["boxes", "scores", "idxs", "iou_threshold"]
    assert [n for n, _ in params(ops.RoIAlign.__init__)] == ["self", "output_size", "spatial_scale",
                                                             "sampling_ratio", "aligned"]
    assert opkiln.roi_align is ops.roi_align and opkiln.RoIAlign is ops.RoIAlign


# The drop-ins: each function and class as torchvision.ops names it.
_DROP_IN_FUNCTIONS = ("nms", "batched_nms", "roi_align", "roi_pool", "ps_roi_align", "ps_roi_pool")
_DROP_IN_CLASSES = ("RoIAlign", "RoIPool", "PSRoIAlign", "PSRoIPool")


def test_signatures_equal_the_installed_torchvisions() -> None:
    """The whole signature: names, defaults, kinds and annotations (torchvision's evaluated ones)."""
    tv_ops = _tv()
    for name in _DROP_IN_FUNCTIONS:
        assert inspect.signature(getattr(ops, name)) == inspect.signature(getattr(tv_ops, name)), name
    for name in _DROP_IN_CLASSES:
        for method in ("__init__", "forward"):
            ours, theirs = getattr(getattr(ops, name), method), getattr(getattr(tv_ops, name), method)
            assert inspect.signature(ours) == inspect.signature(theirs), f"{name}.{method}"


def _drop_in_modules() -> dict[str, torch.nn.Module]:
    """Each drop-in class by the name of the function it calls."""
    return {"roi_align": ops.RoIAlign((5, 5), 1.0, -1), "roi_pool": ops.RoIPool((5, 5), 1.0),
            "ps_roi_align": ops.PSRoIAlign(2, 1.0, -1), "ps_roi_pool": ops.PSRoIPool(2, 1.0)}


@pytest.mark.parametrize("function", list(_drop_in_modules()))
def test_fx_traces_a_drop_in_class_to_one_call(function: str) -> None:
    """torchvision wraps its functional ops with torch.fx.wrap: a symbolic trace is one leaf call."""
    module = _drop_in_modules()[function]
    traced = torch.fx.symbolic_trace(module)
    calls = [n for n in traced.graph.nodes if n.op not in ("placeholder", "output")]
    assert len(calls) == 1 and calls[0].op == "call_function", traced.graph
    assert calls[0].target is getattr(ops, function)
    x = torch.randn(2, 8, 10, 12, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(traced(x, _ROIS), module(x, _ROIS), rtol=0, atol=0)


def test_fx_feature_extraction_names_the_drop_in_calls() -> None:
    _tv()
    from torchvision.models.feature_extraction import get_graph_node_names

    class Head(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.pools = torch.nn.ModuleList(_drop_in_modules().values())

        def forward(self, x: torch.Tensor, rois: torch.Tensor) -> list[torch.Tensor]:
            return [pool(x, rois) for pool in self.pools]

    train, evaluation = get_graph_node_names(Head())
    assert train == evaluation
    assert {f"pools.{i}.{name}" for i, name in enumerate(_drop_in_modules())} <= set(train), train


def test_roi_align_input_forms() -> None:
    by_tensor = opkiln.roi_align(_X, _ROIS, (3, 4), 0.5, 2, True)
    assert by_tensor.shape == (6, 3, 3, 4)
    # The call of the issue: output_size as an int, spatial_scale positional.
    torch.testing.assert_close(opkiln.roi_align(_X, _ROIS, 5, 1.0), opkiln.roi_align(_X, _ROIS, (5, 5)), rtol=0,
                               atol=0)
    torch.testing.assert_close(opkiln.roi_align(_X, _ROIS, [3, 4], 0.5, 2, True), by_tensor, rtol=0, atol=0)
    kw = opkiln.roi_align(input=_X, boxes=_ROIS, output_size=(3, 4), spatial_scale=0.5, sampling_ratio=2,
                          aligned=True)
    torch.testing.assert_close(kw, by_tensor, rtol=0, atol=0)
    # A list (or tuple) of per-image [L, 4] boxes is rois with the list index as batch index.
    per_image = [_ROIS[_ROIS[:, 0] == i, 1:] for i in range(2)]
    order = torch.cat([torch.nonzero(_ROIS[:, 0] == i).flatten() for i in range(2)])
    for boxes in (per_image, tuple(per_image)):
        torch.testing.assert_close(opkiln.roi_align(_X, boxes, (3, 4), 0.5, 2, True), by_tensor[order], rtol=0,
                                   atol=0)
    assert opkiln.roi_align(_X, [torch.empty(0, 4)], 2).shape == (0, 3, 2, 2)
    module = ops.RoIAlign((3, 4), 0.5, 2, aligned=True)
    torch.testing.assert_close(module(_X, _ROIS), by_tensor, rtol=0, atol=0)
    assert repr(module) == "RoIAlign(output_size=(3, 4), spatial_scale=0.5, sampling_ratio=2, aligned=True)"


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: opkiln.roi_align(_X, torch.zeros(3, 4), 2), AssertionError, r"Tensor\[K, 5\]"),
    (lambda: opkiln.roi_align(_X, [torch.zeros(3, 5)], 2), AssertionError, r"List\[Tensor\[L, 4\]\]"),
    (lambda: opkiln.roi_align(_X, 3, 2), AssertionError, "is expected to be a Tensor"),
    (lambda: opkiln.roi_align(_X, torch.zeros(5), 2), IndexError, "Dimension out of range"),
    (lambda: opkiln.roi_align(_X, [], 2), ValueError, "non-empty list"),
    (lambda: opkiln.roi_align(_X, _ROIS, 2.0), RuntimeError, "pooled_height"),
    (lambda: opkiln.roi_align(_X, _ROIS, (1, 2, 3)), ValueError, "output_size must be an int or a pair"),
    (lambda: opkiln.roi_align(_X, _ROIS.double(), 2), RuntimeError, "cast one of them"),
])
def test_roi_align_bad_forms_raise(call: Callable[[], Any], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        call()


def test_torchscript() -> None:
    x, rois = _X[:, :1], _ROIS
    scripted = torch.jit.script(opkiln.roi_align)
    torch.testing.assert_close(scripted(x, rois, [2, 3], 0.5, 2, True), opkiln.roi_align(x, rois, (2, 3), 0.5, 2, True))
    module = torch.jit.script(ops.RoIAlign(2, 1.0, -1))
    torch.testing.assert_close(module(x, [rois[:2, 1:]]), opkiln.roi_align(x, [rois[:2, 1:]], 2))
    boxes, scores = random_boxes(50, seed=3)
    idxs = torch.randint(0, 3, (50,), generator=torch.Generator().manual_seed(0))
    assert torch.jit.script(opkiln.nms)(boxes, scores, 0.5).tolist() == opkiln.nms(boxes, scores, 0.5).tolist()
    assert (torch.jit.script(opkiln.batched_nms)(boxes, scores, idxs, 0.5).tolist()
            == opkiln.batched_nms(boxes, scores, idxs, 0.5).tolist())


# ---------------------------------------------------------------------------- autocast


def _autocast_devices() -> list[Any]:
    return ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu,
                                               pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")])]


@pytest.mark.parametrize("device", _autocast_devices())
@pytest.mark.parametrize(("x_dtype", "rois_dtype"), [(torch.bfloat16, torch.float32), (torch.float32, torch.bfloat16),
                                                     (torch.float16, torch.float16), (torch.float16, torch.float32)])
def test_roi_align_autocast_computes_in_float32(device: str, x_dtype: torch.dtype, rois_dtype: torch.dtype) -> None:
    x = _X.to(device, x_dtype, copy=True).requires_grad_(True)
    rois = _ROIS.to(device, rois_dtype)
    with torch.autocast(device, torch.bfloat16):
        out = opkiln.roi_align(x, rois, (3, 3), 0.5, 2, True)
    # torchvision's rule: both in float32, the result back in input's dtype.
    expected = opkiln.roi_align(x.detach().float(), rois.float(), (3, 3), 0.5, 2, True).to(x_dtype)
    assert out.dtype == x_dtype
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    out.float().sum().backward()
    assert x.grad is not None and x.grad.dtype == x_dtype


@pytest.mark.parametrize("device", _autocast_devices())
def test_autocast_leaves_float64_alone(device: str) -> None:
    with torch.autocast(device, torch.bfloat16), pytest.raises(RuntimeError, match="cast one of them"):
        opkiln.roi_align(_X.to(device, torch.float64), _ROIS.to(device, torch.bfloat16), 2)
    boxes, scores = random_boxes(20, torch.float64)
    with torch.autocast(device, torch.bfloat16), pytest.raises(RuntimeError, match="cast one of them"):
        opkiln.nms(boxes.to(device), scores.to(device, torch.bfloat16), 0.5)
    with torch.autocast(device, torch.bfloat16):
        assert opkiln.nms(boxes.to(device), scores.to(device), 0.5).tolist() == opkiln.nms(boxes, scores, 0.5).tolist()


@pytest.mark.parametrize("device", _autocast_devices())
def test_nms_autocast_computes_in_float32(device: str) -> None:
    boxes, scores = random_boxes(300, torch.float32, seed=5)
    b16, s32 = boxes.to(device, torch.bfloat16), scores.to(device)
    expected = opkiln.nms(b16.float(), s32, 0.5).tolist()
    with torch.autocast(device, torch.bfloat16):
        assert opkiln.nms(b16, s32, 0.5).tolist() == expected
    with pytest.raises(RuntimeError, match="cast one of them"):
        opkiln.nms(b16, s32, 0.5)  # outside autocast: no cast


# ---------------------------------------------------------------------------- quantized


def test_quantized_inputs_are_refused_with_the_workaround() -> None:
    boxes, scores = random_boxes(10)
    qb = torch.quantize_per_tensor(boxes, 0.5, 0, torch.quint8)
    qs = torch.quantize_per_tensor(scores, 0.01, 0, torch.quint8)
    with pytest.raises(NotImplementedError, match=r"quantized.*boxes\.dequantize\(\)"):
        opkiln.nms(qb, qs, 0.5)
    assert opkiln.nms(qb.dequantize(), qs.dequantize(), 0.5).dtype == torch.int64
    qx = torch.quantize_per_tensor(_X, 0.1, 128, torch.quint8)
    qr = torch.quantize_per_tensor(_ROIS, 0.1, 0, torch.quint8)
    with pytest.raises(NotImplementedError, match=r"quantized.*input\.dequantize\(\)"):
        opkiln.roi_align(qx, qr, 2)


# ---------------------------------------------------------------------------- against torchvision


def _tv_cases() -> list[tuple[str, tuple[Any, ...]]]:
    per_image = [_ROIS[_ROIS[:, 0] == i, 1:] for i in range(2)]
    degenerate = torch.tensor([[0.0, 3, 3, 3, 3], [1.0, 5, 5, 2, 2], [0.0, -4, -4, -1, -1], [1.0, 11, 9, 30, 20],
                               [0.0, 0, 0, 12, 10], [1.7, 1, 1, 4, 4], [-0.5, 1, 1, 4, 4]])
    cases = []
    for aligned in (False, True):
        for ratio in (-1, 0, 1, 2, 3):
            cases.append((f"tensor-{aligned}-{ratio}", (_X, _ROIS, (3, 4), 0.5, ratio, aligned)))
            cases.append((f"degenerate-{aligned}-{ratio}", (_X, degenerate, 2, 1.0, ratio, aligned)))
        cases.append((f"list-{aligned}", (_X, per_image, 5, 0.25, 2, aligned)))
    cases += [("int", (_X, _ROIS, 4)), ("list-size", (_X, _ROIS, [2, 6], 2.0)), ("no-rois", (_X, _ROIS[:0], 2)),
              ("one-empty-image", (_X, [torch.empty(0, 4)], 3)),
              ("no-channels", (_X[:, :0], _ROIS, 2))]
    return cases


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize(("name", "args"), _tv_cases(), ids=[c[0] for c in _tv_cases()])
def test_roi_align_equals_torchvision(name: str, args: tuple[Any, ...], dtype: torch.dtype) -> None:
    tv_ops = _tv()
    x = args[0].to(dtype, copy=True).requires_grad_(True)
    boxes = [b.to(dtype) for b in args[1]] if isinstance(args[1], list) else args[1].to(dtype)
    xt = x.detach().clone().requires_grad_(True)
    out = ops.roi_align(x, boxes, *args[2:])
    expected = tv_ops.roi_align(xt, boxes, *args[2:])
    assert out.dtype == expected.dtype and out.shape == expected.shape
    # Equal up to the last bit or two: a bin's samples are summed in another order.
    torch.testing.assert_close(out, expected, **TOL[dtype])
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(2), dtype=dtype)
    out.backward(grad)
    expected.backward(grad)
    assert x.grad is not None and xt.grad is not None
    torch.testing.assert_close(x.grad, xt.grad, rtol=1e-6 if dtype == torch.float32 else 1e-12, atol=1e-6)
    if len(args) >= 5:  # RoIAlign takes output_size, spatial_scale and sampling_ratio (aligned optional)
        module, tv_module = ops.RoIAlign(*args[2:]), tv_ops.RoIAlign(*args[2:])
        assert repr(module) == repr(tv_module)
        torch.testing.assert_close(module(x, boxes), tv_module(x, boxes), **TOL[dtype])


@pytest.mark.parametrize(("x_dtype", "rois_dtype"), [(torch.bfloat16, torch.float32), (torch.float32, torch.bfloat16),
                                                     (torch.float16, torch.float16), (torch.float64, torch.bfloat16),
                                                     (torch.float64, torch.float64)])
def test_autocast_equals_torchvision(x_dtype: torch.dtype, rois_dtype: torch.dtype) -> None:
    tv_ops = _tv()
    x, rois = _X.to(x_dtype), _ROIS.to(rois_dtype)
    with torch.autocast("cpu", torch.bfloat16):
        ours = _outcome(lambda: ops.roi_align(x, rois, (3, 3), 0.5, 2, True))
        theirs = _outcome(lambda: tv_ops.roi_align(x, rois, (3, 3), 0.5, 2, True))
        assert ours[0] == theirs[0]
        if ours[0] == "ok":
            assert ours[1].dtype == theirs[1].dtype
            torch.testing.assert_close(ours[1], theirs[1], **TOL[x_dtype])
        boxes, scores = random_boxes(200, seed=4)
        b, s = boxes.to(x_dtype), scores.to(rois_dtype)
        ours = _outcome(lambda: ops.nms(b, s, 0.5).tolist())
        assert ours == _outcome(lambda: tv_ops.nms(b, s, 0.5).tolist())
        # batched_nms's coordinate shift runs in the boxes' dtype (autocast does not cast it), then nms in float32.
        idxs = torch.randint(0, 3, (200,), generator=torch.Generator().manual_seed(1))
        ours = _outcome(lambda: ops.batched_nms(b, s, idxs, 0.5).tolist())
        assert ours == _outcome(lambda: tv_ops.batched_nms(b, s, idxs, 0.5).tolist())


@pytest.mark.parametrize("n", [0, 1, 7, 300, 999, 1001, 3000])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_nms_and_batched_nms_equal_torchvision(n: int, dtype: torch.dtype) -> None:
    tv_ops = _tv()
    # Integer corners and distinct scores: no rounding and no tie decides (torchvision's sort is
    # not stable); 1001 and 3000 boxes take torchvision's per-category path of batched_nms.
    g = torch.Generator().manual_seed(n)
    xy = torch.randint(0, 200, (n, 2), generator=g)
    boxes = torch.cat([xy, xy + torch.randint(0, 40, (n, 2), generator=g)], 1).to(dtype)
    scores = (torch.randperm(n, generator=g).to(torch.float64) / max(n, 1)).to(dtype)
    idxs = torch.randint(0, 5, (n,), generator=g)
    for thr in (0.0, 0.3, 0.5, 0.9):
        assert ops.nms(boxes, scores, thr).tolist() == tv_ops.nms(boxes, scores, thr).tolist()
        for ids in (idxs, idxs.float()):
            assert (ops.batched_nms(boxes, scores, ids, thr).tolist()
                    == tv_ops.batched_nms(boxes, scores, ids, thr).tolist())


@pytest.mark.parametrize(("name", "call"), [
    ("nms-shape", lambda o: o.nms(torch.zeros(3, 5), torch.zeros(3), 0.5)),
    ("nms-empty-1d", lambda o: o.nms(torch.empty(0), torch.empty(0), 0.5)),
    ("nms-empty", lambda o: o.nms(torch.empty(0, 4), torch.empty(0), 0.5).tolist()),
    ("nms-dtypes", lambda o: o.nms(torch.zeros(3, 4), torch.zeros(3, dtype=torch.float64), 0.5)),
    ("nms-int", lambda o: o.nms(torch.zeros(3, 4, dtype=torch.int64), torch.zeros(3, dtype=torch.int64), 0.5)),
    ("batched-empty-any-shape", lambda o: o.batched_nms(torch.empty(0), torch.empty(3), torch.empty(7), 0.5).tolist()),
    ("batched-empty-5x0", lambda o: o.batched_nms(torch.empty(5, 0), torch.empty(5), torch.empty(5), 0.5).tolist()),
    ("batched-bool-idxs", lambda o: o.batched_nms(torch.tensor([[0.0, 0, 2, 2]] * 2), torch.tensor([0.9, 0.8]),
                                                  torch.tensor([True, False]), 0.5).tolist()),
    ("roi-dtypes", lambda o: o.roi_align(_X, _ROIS.double(), 2)),
    ("roi-boxes-K4", lambda o: o.roi_align(_X, torch.zeros(3, 4), 2)),
    ("roi-boxes-1d", lambda o: o.roi_align(_X, torch.zeros(5), 2)),
    ("roi-boxes-list-K5", lambda o: o.roi_align(_X, [torch.zeros(3, 5)], 2)),
    ("roi-boxes-int", lambda o: o.roi_align(_X, 3, 2)),
    ("roi-boxes-empty-list", lambda o: o.roi_align(_X, [], 2)),
    ("roi-float-size", lambda o: o.roi_align(_X, _ROIS, 2.0)),
    ("roi-input-3d", lambda o: o.roi_align(_X[0], _ROIS, 2)),
    ("roi-half", lambda o: o.roi_align(_X.half(), _ROIS.half(), 2).dtype),
])
def test_same_outcome_as_torchvision(name: str, call: Callable[[ModuleType], Any]) -> None:
    """The same call gives the same result, or the same exception type, as torchvision."""
    tv_ops = _tv()
    assert _outcome(lambda: call(ops)) == _outcome(lambda: call(tv_ops)), name


def test_generated_roi_align_equals_torchvision() -> None:
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    tv_ops = _tv()
    coord = st.floats(-8, 24, allow_nan=False, width=32)

    # Output size 0 is left out: torchvision's CPU kernel then computes an infinite adaptive sample
    # count (undefined; seen: "cannot create std::vector larger than max_size()"), opkiln gives the
    # empty result (test_roi_align.py::test_zero_output_size_is_an_empty_result).
    @hypothesis.settings(max_examples=60, deadline=None)
    @hypothesis.given(boxes=st.lists(st.tuples(st.integers(0, 1), coord, coord, coord, coord), min_size=0, max_size=6),
                      size=st.tuples(st.integers(1, 4), st.integers(1, 4)), scale=st.sampled_from([0.5, 1.0, 2.0]),
                      ratio=st.integers(-1, 3), aligned=st.booleans())
    def check(boxes: list[tuple[int, float, float, float, float]], size: tuple[int, int], scale: float, ratio: int,
              aligned: bool) -> None:
        rois = torch.tensor(boxes, dtype=torch.float32).reshape(-1, 5)
        ours = ops.roi_align(_X, rois, size, scale, ratio, aligned)
        # An inverted box with aligned=True and adaptive sampling has a negative sample count:
        # torchvision's CPU kernel then sizes a vector with it (undefined; seen: "cannot create
        # std::vector larger than max_size()"); opkiln gives such a roi no samples, output 0.
        undefined = (rois[:, 3] < rois[:, 1]) | (rois[:, 4] < rois[:, 2]) if aligned and ratio <= 0 else \
            torch.zeros(rois.shape[0], dtype=torch.bool)
        assert torch.equal(ours[undefined], torch.zeros_like(ours[undefined]))
        expected = tv_ops.roi_align(_X, rois[~undefined], size, scale, ratio, aligned)
        torch.testing.assert_close(ours[~undefined], expected, **TOL[torch.float32])

    check()


# ---------------------------------------------------------------------------- roi_pool


def test_roi_pool_signatures_equal_the_installed_torchvisions() -> None:
    tv_ops = _tv()

    def params(f: Callable[..., Any]) -> list[tuple[str, Any, Any]]:
        return [(p.name, p.default, p.kind) for p in inspect.signature(f).parameters.values()]

    assert params(ops.roi_pool) == params(tv_ops.roi_pool)
    assert params(ops.RoIPool.__init__) == params(tv_ops.RoIPool.__init__)
    assert params(ops.RoIPool.forward) == params(tv_ops.RoIPool.forward)
    assert opkiln.roi_pool is ops.roi_pool and opkiln.RoIPool is ops.RoIPool


def _tv_roi_pool_dtypes() -> list[Any]:
    # torchvision's CPU roi_pool kernel has no bfloat16 (its CUDA one has); ours is checked against
    # the reference for it (test_roi_pool.py).
    return [torch.float32, torch.float64, torch.float16]


@pytest.mark.parametrize("device", _autocast_devices())
@pytest.mark.parametrize("dtype", _tv_roi_pool_dtypes(), ids=str)
@pytest.mark.parametrize("spatial_scale", [1.0, 0.37, 2.0], ids=lambda s: f"scale{s}")
def test_roi_pool_matches_torchvision(device: str, dtype: torch.dtype, spatial_scale: float) -> None:
    """Forward to the bit (output and argmax); backward to the bit in float32/float64, within
    float16's tolerance in float16 (torchvision adds in float16, opkiln in float32)."""
    tv_ops = _tv()
    x = _X.to(device, dtype)
    rois = random_rois(9, 2, 10, 12, torch.float64, seed=4, spatial_scale=spatial_scale).to(device, dtype)
    ours = torch.ops.opkiln.roi_pool(x, rois, spatial_scale, 3, 4)
    theirs = torch.ops.torchvision.roi_pool(x, rois, spatial_scale, 3, 4)
    assert torch.equal(ours[0], theirs[0]) and torch.equal(ours[1], theirs[1])
    assert torch.equal(opkiln.roi_pool(x, rois, (3, 4), spatial_scale), tv_ops.roi_pool(x, rois, (3, 4), spatial_scale))
    grad = torch.randn(ours[0].shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64).to(device, dtype)
    xs = [x.detach().clone().requires_grad_(True) for _ in range(2)]
    opkiln.roi_pool(xs[0], rois, (3, 4), spatial_scale).backward(grad)
    tv_ops.roi_pool(xs[1], rois, (3, 4), spatial_scale).backward(grad)
    tol = {"rtol": 0, "atol": 0} if dtype != torch.float16 else TOL[dtype]
    torch.testing.assert_close(xs[0].grad, xs[1].grad, **tol)


def test_roi_pool_per_image_boxes_match_torchvision() -> None:
    tv_ops = _tv()
    per_image = [_ROIS[_ROIS[:, 0] == i, 1:] for i in range(2)]
    assert torch.equal(opkiln.roi_pool(_X, per_image, 3, 0.5), tv_ops.roi_pool(_X, per_image, 3, 0.5))
    assert torch.equal(ops.RoIPool((2, 3), 0.5)(_X, _ROIS), tv_ops.RoIPool((2, 3), 0.5)(_X, _ROIS))
    assert repr(ops.RoIPool((2, 3), 0.5)) == repr(tv_ops.RoIPool((2, 3), 0.5))
