"""The RoI family's box layout and parameters are the member's input: an op with `kBoxColumns = 6`
(batch, cx, cy, w, h, angle) and `Params` (clockwise) gets every column of its rows and its parameter
in roi(), through the family's CPU drivers forward and backward, and the batch-index check strides
its rows (tests/new_op/examples/box_layout_check.cpp, torch-free, compiled with the C++ compiler
here: about 3 s)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

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
