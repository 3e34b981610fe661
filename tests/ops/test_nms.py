"""opkiln.nms / batched_nms: torchvision's semantics, checked against a pure-PyTorch reference."""

from __future__ import annotations

import math

import pytest
import torch

import opkiln
from support.ops_reference import DEVICES, FLOAT_DTYPES, HAS_CUDA, nms_ref, random_boxes

# What tests/wheels/test_wheel_install.py runs in a fresh venv after `pip install` of each wheel
# (op name -> a Python expression over torch and opkiln).
INSTALL_SAMPLES = {
    "nms": "opkiln.nms(torch.tensor([[0., 0, 10, 10], [1, 1, 10, 10], [20, 20, 30, 30]]),"
           " torch.tensor([0.9, 0.8, 0.7]), 0.5)",
    "batched_nms": "opkiln.batched_nms(torch.tensor([[0., 0, 10, 10], [1, 1, 10, 10]]), torch.tensor([0.9, 0.8]),"
                   " torch.tensor([0, 1]), 0.5)",
}


def _t(rows: list[list[float]], dtype: torch.dtype = torch.float32, device: str = "cpu") -> torch.Tensor:
    return torch.tensor(rows, dtype=dtype, device=device)


def _check(boxes: torch.Tensor, scores: torch.Tensor, thr: float, expected: list[int] | None = None) -> torch.Tensor:
    keep = opkiln.nms(boxes, scores, thr)
    assert keep.dtype == torch.int64 and keep.device == boxes.device and keep.dim() == 1
    ref = nms_ref(boxes, scores, thr)
    assert keep.cpu().tolist() == ref.tolist()
    if expected is not None:
        assert keep.cpu().tolist() == expected
    return keep


# ---------------------------------------------------------------------------- hand-checked cases


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_iou_exactly_at_threshold_is_not_suppressed(device: str, dtype: torch.dtype) -> None:
    # IoU([0,0,1,1], [0,0,1,2]) = 1/2; IoU([0,0,4,4], [0,0,4,3]) = 12/16 = 3/4: exact in every dtype.
    boxes = _t([[0, 0, 1, 1], [0, 0, 1, 2], [10, 10, 14, 14], [10, 10, 14, 13]], dtype, device)
    scores = _t([0.9, 0.8, 0.7, 0.6], dtype, device)
    _check(boxes, scores, 0.5, [0, 1, 2])
    _check(boxes, scores, 0.75, [0, 1, 2, 3])
    _check(boxes, scores, 0.49, [0, 2])
    _check(boxes, scores, 0.74, [0, 1, 2])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_ties_identical_and_zero_area_boxes(device: str, dtype: torch.dtype) -> None:
    same = [[1, 1, 5, 5]] * 4
    # Equal scores: lower index first, and it suppresses its identical copies.
    _check(_t(same, dtype, device), _t([0.5] * 4, dtype, device), 0.5, [0])
    _check(_t(same, dtype, device), _t([0.1, 0.5, 0.5, 0.2], dtype, device), 0.5, [1])
    # IoU 1 is not > 1: nothing is suppressed.
    _check(_t(same, dtype, device), _t([0.1, 0.5, 0.5, 0.2], dtype, device), 1.0, [1, 2, 3, 0])
    # Zero-area boxes: IoU with an identical zero-area box is 0/0 (NaN), never > threshold,
    # and a zero-area box inside a big one has IoU 0.
    zero = _t([[2, 2, 2, 2], [2, 2, 2, 2], [0, 0, 4, 4], [3, 1, 3, 5]], dtype, device)
    _check(zero, _t([0.9, 0.8, 0.7, 0.6], dtype, device), 0.0, [0, 1, 2, 3])
    # A negative threshold suppresses every overlap-free box too (IoU 0 > -0.1), except NaN IoUs.
    _check(zero, _t([0.6, 0.8, 0.9, 0.7], dtype, device), -0.1, [2])
    _check(_t([[0, 0, 1, 1], [5, 5, 6, 6]], dtype, device), _t([0.1, 0.2], dtype, device), -0.1, [1])


@pytest.mark.parametrize("device", DEVICES)
def test_all_but_one_suppressed_and_score_order(device: str) -> None:
    n = 300
    boxes = torch.tensor([[0.0, 0.0, 10.0, 10.0]], device=device).repeat(n, 1)
    boxes[:, 2] += torch.linspace(0, 0.5, n, device=device)  # nearly identical boxes
    scores = torch.rand(n, generator=torch.Generator().manual_seed(0)).to(device)
    keep = _check(boxes, scores, 0.5)
    assert keep.tolist() == [int(scores.argmax())]
    # Disjoint boxes: all kept, by decreasing score.
    xs = torch.arange(n, dtype=torch.float32, device=device) * 2
    disjoint = torch.stack([xs, xs, xs + 1, xs + 1], dim=1)
    keep = _check(disjoint, scores, 0.0)
    assert keep.tolist() == torch.sort(scores, descending=True, stable=True).indices.tolist()


@pytest.mark.parametrize("device", DEVICES)
def test_special_scores(device: str) -> None:
    # NaN first (as torch.sort(descending=True)), -0.0 ties with +0.0 (index order), infinities.
    xs = torch.arange(6, dtype=torch.float32) * 3
    boxes = torch.stack([xs, xs, xs + 1, xs + 1], dim=1).to(device)
    scores = torch.tensor([0.0, float("-inf"), -0.0, float("nan"), float("inf"), 0.0], device=device)
    _check(boxes, scores, 0.5, [3, 4, 0, 2, 5, 1])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_empty_and_single(device: str, dtype: torch.dtype) -> None:
    empty = opkiln.nms(torch.empty(0, 4, dtype=dtype, device=device), torch.empty(0, dtype=dtype, device=device), 0.5)
    assert empty.shape == (0,) and empty.dtype == torch.int64 and empty.device.type == device
    _check(_t([[1, 2, 3, 4]], dtype, device), _t([0.3], dtype, device), 0.5, [0])


# ---------------------------------------------------------------------------- random boxes


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize(("n", "thr"), [(2, 0.5), (63, 0.3), (64, 0.5), (65, 0.5), (129, 0.7), (1000, 0.5),
                                        (1000, 0.0), (777, 0.95)])
def test_random_boxes_match_reference(device: str, dtype: torch.dtype, n: int, thr: float) -> None:
    boxes, scores = random_boxes(n, dtype, seed=n)
    _check(boxes.to(device), scores.to(device), thr)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_thresholds_between_float_ious(device: str, dtype: torch.dtype) -> None:
    """The float IoU against a double threshold that float32 cannot hold: the threshold at each pair's IoU,
    one double ulp either side of it, halfway to the next float, and beyond float32's range (the CPU
    kernel compares in float against the largest float not above the threshold)."""
    g = torch.Generator().manual_seed(37)
    for _ in range(60):
        xy = torch.rand(2, 2, generator=g, dtype=torch.float64) * 8
        boxes = torch.cat([xy, xy + 1 + torch.rand(2, 2, generator=g, dtype=torch.float64) * 8], 1).to(dtype)
        scores = torch.tensor([0.9, 0.8], dtype=dtype)
        b = boxes.float()
        w = (torch.minimum(b[0, 2], b[1, 2]) - torch.maximum(b[0, 0], b[1, 0])).clamp(min=0)
        h = (torch.minimum(b[0, 3], b[1, 3]) - torch.maximum(b[0, 1], b[1, 1])).clamp(min=0)
        inter = w * h
        area = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
        iou = (inter / (area[0] + area[1] - inter)).item()  # a float32 value, as a double
        up = torch.nextafter(torch.tensor(iou, dtype=torch.float32), torch.tensor(2.0)).item()
        for thr in (iou, math.nextafter(iou, -1.0), math.nextafter(iou, 2.0), (iou + up) / 2, up):
            _check(boxes.to(device), scores.to(device), thr)
    boxes = _t([[0, 0, 2, 2], [1, 1, 3, 3], [0, 0, 2, 2]], dtype, device)
    for thr in (math.inf, -math.inf, math.nan, 1e39, -1e39, 3.4028235677973366e38, -3.4028235677973366e38):
        _check(boxes, _t([[0.9, 0.8, 0.7]], dtype, device)[0], thr)


@pytest.mark.parametrize("device", DEVICES)
def test_half_precision_equals_float_of_upcast(device: str) -> None:
    boxes, scores = random_boxes(500, torch.float16, seed=3)
    boxes, scores = boxes.to(device), scores.to(device)
    assert opkiln.nms(boxes, scores, 0.4).tolist() == opkiln.nms(boxes.float(), scores.float(), 0.4).tolist()


@pytest.mark.parametrize("device", DEVICES)
def test_grid_of_exact_overlaps(device: str) -> None:
    # Integer boxes on a grid with many IoUs exactly at simple fractions and many tied scores.
    g = torch.Generator().manual_seed(5)
    xy = torch.randint(0, 12, (400, 2), generator=g).double()
    wh = torch.randint(0, 5, (400, 2), generator=g).double()
    boxes = torch.cat([xy, xy + wh], 1)
    scores = torch.randint(0, 8, (400,), generator=g).double() / 8
    for thr in (0.0, 0.25, 0.5, 1 / 3):
        for dtype in (torch.float32, torch.float64):
            _check(boxes.to(device, dtype), scores.to(device, dtype), thr)


@pytest.mark.parametrize("device", DEVICES)
def test_non_contiguous_inputs(device: str) -> None:
    boxes, scores = random_boxes(301, seed=7)
    wide = torch.zeros(301, 8, device=device)
    wide[:, ::2] = boxes.to(device)
    strided_scores = torch.stack([scores, scores], 1).to(device)[:, 1]
    assert not wide[:, ::2].is_contiguous() and not strided_scores.is_contiguous()
    assert opkiln.nms(wide[:, ::2], strided_scores, 0.5).tolist() == nms_ref(boxes, scores, 0.5).tolist()


# ---------------------------------------------------------------------------- batched_nms


def _batched_ref(boxes: torch.Tensor, scores: torch.Tensor, idxs: torch.Tensor, thr: float) -> list[int]:
    kept: list[int] = []
    for c in idxs.unique().tolist():
        members = torch.nonzero(idxs == c).flatten()
        kept += members[nms_ref(boxes[members], scores[members], thr)].tolist()
    return sorted(kept, key=lambda i: (-float(scores[i]), i))


@pytest.mark.parametrize("device", DEVICES)
def test_batched_nms_by_category(device: str) -> None:
    boxes, scores = random_boxes(400, torch.float64, seed=11)
    idxs = torch.randint(0, 5, (400,), generator=torch.Generator().manual_seed(1))
    keep = opkiln.batched_nms(boxes.to(device), scores.to(device), idxs.to(device), 0.5)
    assert keep.cpu().tolist() == _batched_ref(boxes, scores, idxs, 0.5)
    # Identical boxes in different categories survive; in the same category they do not.
    same = torch.tensor([[0.0, 0, 2, 2]] * 3, device=device)
    s = torch.tensor([0.9, 0.8, 0.7], device=device)
    assert opkiln.batched_nms(same, s, torch.tensor([0, 1, 0], device=device), 0.5).tolist() == [0, 1]
    empty = opkiln.batched_nms(torch.empty(0, 4, device=device), torch.empty(0, device=device),
                               torch.empty(0, dtype=torch.int64, device=device), 0.5)
    assert empty.shape == (0,)


def test_batched_nms_idxs() -> None:
    boxes, scores = random_boxes(4)
    with pytest.raises(RuntimeError, match=r"idxs must have shape \[N\]"):
        opkiln.batched_nms(boxes, scores, torch.zeros(3, dtype=torch.int64), 0.5)
    # Float category ids are categories too (torchvision accepts them): each distinct value is one.
    same = torch.tensor([[0.0, 0, 2, 2]] * 3)
    s = torch.tensor([0.9, 0.8, 0.7])
    assert opkiln.batched_nms(same, s, torch.tensor([0.0, 1.0, 0.0]), 0.5).tolist() == [0, 1]


@pytest.mark.parametrize(("boxes", "scores", "idxs"), [
    (torch.empty(0, 4), torch.empty(0), torch.empty(0, dtype=torch.int64)),
    (torch.empty(0), torch.empty(3), torch.empty(7)),  # any shapes once boxes is empty, as torchvision
    (torch.empty(5, 0), torch.empty(5), torch.empty(2, 2)),
])
def test_batched_nms_empty_boxes_in_any_shape(boxes: torch.Tensor, scores: torch.Tensor, idxs: torch.Tensor) -> None:
    keep = opkiln.batched_nms(boxes, scores, idxs, 0.5)
    assert keep.shape == (0,) and keep.dtype == torch.int64 and keep.device == boxes.device


def test_batched_nms_many_boxes_runs_per_category() -> None:
    # Over 4000 coordinates on the CPU torchvision runs nms per category (exact for huge coordinates,
    # where the coordinate trick loses precision); so does opkiln.
    boxes, scores = random_boxes(2000, torch.float64, seed=23, extent=1e15, max_size=1e14)
    idxs = torch.randint(0, 4, (2000,), generator=torch.Generator().manual_seed(2))
    assert opkiln.batched_nms(boxes, scores, idxs, 0.5).tolist() == _batched_ref(boxes, scores, idxs, 0.5)


# ---------------------------------------------------------------------------- opcheck, compile, errors


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_opcheck(device: str, dtype: torch.dtype) -> None:
    for n in (0, 1, 50):
        boxes, scores = random_boxes(n, dtype, seed=n)
        torch.library.opcheck(torch.ops.opkiln.nms.default, (boxes.to(device), scores.to(device), 0.5))


def test_torch_compile_fullgraph() -> None:
    boxes, scores = random_boxes(200, seed=13)

    @torch.compile(fullgraph=True, backend="aot_eager")
    def f(b: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        keep = opkiln.nms(b * 1.0, s, 0.5)
        return b[keep].sum(1)

    expected = boxes[nms_ref(boxes, scores, 0.5)].sum(1)
    torch.testing.assert_close(f(boxes, scores), expected)


@pytest.mark.parametrize("device", DEVICES)
def test_inputs_that_require_grad(device: str) -> None:
    boxes, scores = random_boxes(100, seed=17)
    b = boxes.to(device).requires_grad_(True)
    s = scores.to(device).requires_grad_(True)
    keep = opkiln.nms(b, s, 0.5)
    assert not keep.requires_grad
    assert keep.cpu().tolist() == nms_ref(boxes, scores, 0.5).tolist()
    torch.library.opcheck(torch.ops.opkiln.nms.default, (b, s, 0.5))


@pytest.mark.parametrize(
    ("boxes", "scores", "error", "match"),
    [
        (torch.zeros(3, 5), torch.zeros(3), RuntimeError, r"boxes must have shape \[N, 4\]"),
        (torch.zeros(3, 4, 1), torch.zeros(3), RuntimeError, r"boxes must have shape \[N, 4\]"),
        (torch.zeros(3, 4), torch.zeros(4), RuntimeError, r"scores must have shape \[N\]"),
        (torch.zeros(3, 4), torch.zeros(3, 1), RuntimeError, r"scores must have shape \[N\]"),
        (torch.zeros(3, 4), torch.zeros(3, dtype=torch.float64), RuntimeError, "cast one of them"),
        (torch.zeros(3, 4, dtype=torch.int64), torch.zeros(3, dtype=torch.int64), RuntimeError, "must be float32"),
    ],
)
def test_bad_arguments_raise(boxes: torch.Tensor, scores: torch.Tensor, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        opkiln.nms(boxes, scores, 0.5)


# ---------------------------------------------------------------------------- CUDA only


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_cuda_mixed_devices_raise() -> None:
    with pytest.raises(RuntimeError, match="same device"):
        opkiln.nms(torch.zeros(3, 4, device="cuda"), torch.zeros(3), 0.5)


def _assert_same_keep(got: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    got_list, exp_list = got.cpu().tolist(), expected.cpu().tolist()
    if got_list != exp_list:
        first = next((i for i, (a, b) in enumerate(zip(got_list, exp_list, strict=False)) if a != b),
                     min(len(got_list), len(exp_list)))
        pytest.fail(f"{what}: kept {len(got_list)} vs {len(exp_list)} boxes; first difference at position {first}: "
                    f"{got_list[first:first + 5]} vs {exp_list[first:first + 5]}")


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize(("n", "thr", "extent"), [(5000, 0.5, 1000.0), (20000, 0.5, 2000.0), (20000, 0.7, 300.0),
                                                 (4097, 0.3, 100.0)])
def test_cuda_matches_cpu_kernel(dtype: torch.dtype, n: int, thr: float, extent: float) -> None:
    # Many boxes: blocks fully suppressed, a partially filled last block, ties from 16-bit scores.
    boxes, scores = random_boxes(n, dtype, seed=n, extent=extent, max_size=60.0)
    gpu = opkiln.nms(boxes.cuda(), scores.cuda(), thr)
    assert gpu.device.type == "cuda" and gpu.dtype == torch.int64
    _assert_same_keep(gpu, opkiln.nms(boxes, scores, thr), f"cuda vs cpu kernel, {dtype}")


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_cuda_several_mask_chunks_match_cpu_kernel() -> None:
    # 70001 boxes: the bitmask is built in about ten chunks, and dense boxes make later
    # chunks skip whole suppressed row blocks. Dense keeps the CPU kernel fast.
    boxes, scores = random_boxes(70001, torch.float32, seed=70001, extent=1500.0, max_size=60.0)
    _assert_same_keep(opkiln.nms(boxes.cuda(), scores.cuda(), 0.5), opkiln.nms(boxes, scores, 0.5),
                      "cuda vs cpu kernel, 70001 boxes")


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_cuda_runs_on_the_current_stream() -> None:
    boxes, scores = random_boxes(3000, seed=21)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        b, s = boxes.to("cuda", non_blocking=True), scores.to("cuda", non_blocking=True)
        keep = opkiln.nms(b * 1.0, s, 0.5)
    stream.synchronize()
    assert keep.cpu().tolist() == nms_ref(boxes, scores, 0.5).tolist()


def _integer_boxes(n: int, extent: int, max_size: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Integer corners (every area and intersection exact, so no rounding can decide) and distinct scores
    (no ties, whose order torchvision leaves to its sort)."""
    g = torch.Generator().manual_seed(n)
    xy = torch.randint(0, extent, (n, 2), generator=g)
    wh = torch.randint(0, max_size, (n, 2), generator=g)
    boxes = torch.cat([xy, xy + wh], 1).to(dtype)
    scores = (torch.randperm(n, generator=g).to(torch.float64) / n).to(dtype)
    return boxes.cuda(), scores.cuda()


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize(("n", "extent"), [(1, 100), (100, 100), (5000, 1000), (30000, 1000), (70001, 20000)])
def test_cuda_matches_torchvision(dtype: torch.dtype, n: int, extent: int) -> None:
    tv_ops = pytest.importorskip("torchvision.ops")
    boxes, scores = _integer_boxes(n, extent, 80, dtype)
    idxs = torch.randint(0, 7, (n,), generator=torch.Generator().manual_seed(n)).cuda()
    for thr in (0.5, 0.25, 0.75):
        _assert_same_keep(opkiln.nms(boxes, scores, thr), tv_ops.nms(boxes, scores, thr), f"nms vs torchvision, {thr}")
        _assert_same_keep(opkiln.batched_nms(boxes, scores, idxs, thr), tv_ops.batched_nms(boxes, scores, idxs, thr),
                          f"batched_nms vs torchvision, {thr}")
