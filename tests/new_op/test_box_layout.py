"""The RoI family's box layout and parameters are the member's input: an op with `kBoxColumns = 6`
(batch, cx, cy, w, h, angle) and `Params` (clockwise) gets every column of its rows and its parameter
in roi(), through the family's CPU drivers forward and backward, and the batch-index check strides
its rows (tests/new_op/examples/box_layout_check.cpp, torch-free, compiled with the C++ compiler
here: about 3 s). On the Python side ops.py's box helpers take the column count (a scaffolded
member of another layout calls `_rois(boxes, N)`; torchvision's ops keep 5 and torchvision's messages)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]


def test_a_six_column_member_reads_its_own_rows_and_parameter(tmp_path: Path) -> None:
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    exe = tmp_path / "box_layout_check"
    built = subprocess.run([cxx, "-std=c++20", "-O1", "-Wall", "-Wextra", "-Werror", f"-I{REPO / 'ops'}",
                            str(REPO / "tests" / "new_op" / "examples" / "box_layout_check.cpp"),
                            str(REPO / "ops" / "common" / "roi_cpu.cpp"), "-o", str(exe)],
                           capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stderr[-3000:]
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()
    # clockwise: roi 0: image 1 at (x 2, y 1) = 18, - angle 0.5; roi 1: image 0 at (x 3, y 2) = 11,
    # - 0.25; roi 2: batch index 5 of 2, zero; the gradients land at those pixels only; the first bad
    # roi is row 2 (6 values a row)
    assert out == ["17.5", "10.75", "0", "1", "2", "3", "2"]


@settings(max_examples=25, deadline=None)
@given(columns=st.integers(2, 9), sizes=st.lists(st.integers(0, 3), min_size=1, max_size=3))
def test_the_box_helpers_take_any_column_count(columns: int, sizes: list[int]) -> None:
    """A list of per-image [L_i, N - 1] rows becomes [sum L_i, N] rows with the image's index first; a
    [K, N] tensor is used as it is; a wrong width fails torchvision's way, naming the widths."""
    from opkiln import ops

    boxes = [torch.rand(n, columns - 1, dtype=torch.float64) for n in sizes]
    rois = ops._rois(boxes, columns)
    ids = torch.cat([torch.full((n,), float(i), dtype=torch.float64) for i, n in enumerate(sizes)])
    assert rois.shape == (sum(sizes), columns)
    assert torch.equal(rois[:, 0], ids) and torch.equal(rois[:, 1:], torch.cat(boxes))
    assert ops._rois(rois, columns) is rois
    with pytest.raises(AssertionError, match=re.escape(f"as Tensor[K, {columns}]")):
        ops._rois(torch.zeros(2, columns + 1), columns)
    with pytest.raises(AssertionError, match=re.escape(f"as List[Tensor[L, {columns - 1}]]")):
        ops._rois([torch.zeros(2, columns)], columns)
    with pytest.raises(RuntimeError, match=re.escape(f"rois must have shape [K, {columns}] (batch index, u), got")):
        ops._check_roi_align_args(torch.zeros(1, 1, 2, 2), torch.zeros(1, columns + 1), 1, 1, "op", columns,
                                  "batch index, u")


def test_torchvisions_layout_keeps_torchvisions_messages() -> None:
    from opkiln import ops

    cases = [(torch.zeros(1, 4), "The boxes tensor shape is not correct as Tensor[K, 5]"),
             ([torch.zeros(1, 5)], "The shape of the tensor in the boxes list is not correct as List[Tensor[L, 4]]"),
             (None, "boxes is expected to be a Tensor[L, 5] or a List[Tensor[K, 4]]")]
    for boxes, message in cases:
        with pytest.raises(AssertionError, match="^" + re.escape(message) + "$"):
            ops._rois(boxes)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match=re.escape("rois must have shape [K, 5] (batch index, x1, y1, x2, y2)")):
        ops._check_roi_align_args(torch.zeros(1, 1, 2, 2), torch.zeros(1, 6), 1, 1, "roi_align")
