"""Both wheels against the real torchvision 0.29.1: the detection ops' tests of tests/ops, run with
the per-torch wheel (+pt214cpu) and the stable-ABI wheel (+cpu) in turn, each in a fresh venv with
torch 2.14.1 and torchvision 0.29.1 (installed with --no-deps: it reuses the build venv's torch).

The same test files, with the same expected error types, run against both wheels: an error that
differs between the ABI modes fails one of the two runs. Skips where torch 2.14.1 or torchvision
0.29.1 cannot be installed (no CUDA build venv, no network).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from support.venvs import make_venv

REPO = Path(__file__).resolve().parents[2]
TORCHVISION = "torchvision==0.29.1"
TESTS = ["tests/ops/test_torchvision_compat.py", "tests/ops/test_nms.py", "tests/ops/test_roi_align.py",
         "tests/ops/test_ps_roi.py", "tests/ops/test_roi_align_generated.py", "tests/ops/test_rms_norm.py",
         "tests/ops/test_weighted_sum.py", "tests/ops/test_deform_conv2d.py"]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def torchvision_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Python of a venv with torch 2.14.1, torchvision 0.29.1 and pytest + hypothesis; no opkiln."""
    python = make_venv(tmp_path_factory.mktemp("torchvision") / "venv", "2.14.1", extra=["pytest", "hypothesis"])
    # torchvision imports numpy and PIL at import time; its torch dependency is the build venv's.
    out = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", TORCHVISION, "numpy", "pillow"],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        pytest.skip(f"cannot install {TORCHVISION}: {out.stderr.strip()[-500:]}")
    return python


def _with_wheel(base: Path, wheel: Path, where: Path) -> Path:
    """A hard-link copy of the torchvision venv (almost no disk) with `wheel` installed; returns its python."""
    venv = where / "venv"
    subprocess.run(["cp", "-al", str(base.parent.parent), str(venv)], check=True)
    # A venv's scripts name their interpreter by absolute path; `python -m pip` does not.
    python = venv / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True)
    return python


@pytest.mark.parametrize("mode", ["torch", "stable"])
def test_detection_ops_match_torchvision_in_both_abi_modes(mode: str, torchvision_venv: Path,
                                                           request: pytest.FixtureRequest,
                                                           tmp_path: Path) -> None:
    wheel: Path = request.getfixturevalue("cpu214_wheel" if mode == "torch" else "stable_cpu_wheel")
    python = _with_wheel(torchvision_venv, wheel, tmp_path)
    probe = subprocess.run([str(python), "-c", "import opkiln, torchvision; "
                            "print(opkiln.build_info()['abi_mode'], torchvision.__version__)"],
                           capture_output=True, text=True, check=True, cwd=tmp_path)
    abi_mode, tv_version = probe.stdout.split()
    assert abi_mode == mode and tv_version.startswith("0.29.1")
    out = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", "-m", "not gpu", *TESTS],
                         capture_output=True, text=True, check=False, cwd=REPO, env=dict(os.environ))
    report = f"{out.stdout[-6000:]}\n{out.stderr[-2000:]}"
    assert out.returncode == 0, report
    # Every torchvision comparison ran: nothing skipped for want of torchvision or hypothesis.
    assert "could not import" not in out.stdout, report
