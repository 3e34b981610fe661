"""On a real GPU: a wheel with no image for the GPU's arch fails with an error naming both archs.

Builds two small CUDA wheels against the running torch (one arch each, via
KILN_CUDA_ARCHS): SASS for an arch the GPU cannot run, and PTX it can JIT.
Each goes into a fresh venv that sees the running torch through a .pth file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from preflight.preflight_support import ARTIFACTS, REPO, fresh_venv, install_wheel

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.slow,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

RUN_ON_GPU = (
    "import torch, opkiln\n"
    "a = torch.ones(1000, device='cuda'); b = torch.zeros(1000, device='cuda')\n"
    "for _ in range(2):\n"
    "    try:\n"
    "        out = opkiln.weighted_sum(a, b, 0.25)\n"
    "        torch.cuda.synchronize()\n"
    "        print('RESULT', out[:3].tolist())\n"
    "    except RuntimeError as exc:\n"
    "        print('ERROR', str(exc).splitlines()[0])\n"
)


def _capability() -> tuple[int, int]:
    return torch.cuda.get_device_capability(0)


def _archs() -> tuple[str, str]:
    """(an arch list with no image for this GPU, one whose PTX it can JIT)."""
    major, _ = _capability()
    uncovered = "8.0" if major != 8 else "9.0"  # SASS never runs on another major
    jit = "8.0+PTX" if major >= 8 else "7.5+PTX"
    return uncovered, jit


def _build(arch: str) -> Path:
    tag = arch.replace(".", "").replace("+", "")
    out = ARTIFACTS / f"wheels-gpu-{tag}"
    if hits := sorted(out.glob("opkiln-*.whl")):
        return hits[-1]
    env = dict(os.environ, KILN_VARIANT="cuda", KILN_CUDA_ARCHS=arch)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-q", "-w", str(out),
                    "-C", f"build-dir={ARTIFACTS / f'build-gpu-{tag}'}", str(REPO)], check=True, env=env)
    (wheel,) = sorted(out.glob("opkiln-*.whl"))
    return wheel


def _venv(arch: str):
    torch_site = Path(torch.__file__).resolve().parents[1]
    venv = fresh_venv(ARTIFACTS / "preflight" / f"gpu-{arch.replace('+', '')}", torch_site)
    install_wheel(venv, _build(arch))
    return venv


def test_gpu_without_an_image_gets_a_named_error():
    uncovered, _ = _archs()
    major, minor = _capability()
    venv = _venv(uncovered)
    proc = venv.run("-c", RUN_ON_GPU)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    errors = [line for line in proc.stdout.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 2, out  # the check is cached only when it passes: every call says the same
    assert f"sm_{major}{minor}" in errors[0] and uncovered in errors[0], errors[0]
    assert "not supported by this opkiln wheel" in errors[0]
    assert "no kernel image is available" not in out
    doctor = venv.run("-m", "opkiln", "doctor", "--json")
    assert doctor.returncode == 1, doctor.stdout + doctor.stderr
    report = json.loads(doctor.stdout)
    coverage = {c["name"]: c for c in report["checks"]}["GPU arch coverage"]
    assert coverage["status"] == "fail"
    assert report["gpu_coverage"][0]["covered_by"] is None
    assert report["torch"]["gpus"][0]["capability"] == f"{major}.{minor}"


def test_gpu_covered_by_ptx_runs():
    _, jit = _archs()
    venv = _venv(jit)
    proc = venv.run("-c", RUN_ON_GPU)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("RESULT [0.25, 0.25, 0.25]") == 2, proc.stdout
    doctor = venv.run("-m", "opkiln", "doctor", "--json")
    report = json.loads(doctor.stdout)
    assert report["gpu_coverage"][0]["covered_by"].startswith("PTX compute_"), report["gpu_coverage"]
    assert doctor.returncode == 0, doctor.stdout
