"""`pip install dist/<wheel>` into a fresh venv with the matching torch, then every op works."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

# Runs inside the fresh venv: every public op in opkiln.ops.__all__ must have a
# sample here and must run; a new op without a sample fails this test.
EXERCISE_ALL_OPS = textwrap.dedent("""
    import json, sys, torch, opkiln
    samples = {
        "weighted_sum": lambda: opkiln.weighted_sum(torch.ones(5), torch.zeros(5), 0.25),
        "rms_norm": lambda: opkiln.rms_norm(torch.randn(4, 8), torch.ones(8), 1e-6),
        "nms": lambda: opkiln.nms(torch.tensor([[0., 0, 10, 10], [1, 1, 10, 10], [20, 20, 30, 30]]),
                                  torch.tensor([0.9, 0.8, 0.7]), 0.5),
        "batched_nms": lambda: opkiln.batched_nms(torch.tensor([[0., 0, 10, 10], [1, 1, 10, 10]]),
                                                  torch.tensor([0.9, 0.8]), torch.tensor([0, 1]), 0.5),
    }
    results = {}
    for name in opkiln.ops.__all__:
        if name not in samples:
            sys.exit(f"no sample for op {name}: add one to tests/wheels/test_wheel_install.py")
        results[name] = samples[name]().tolist()
    print(json.dumps({"version": opkiln.__version__, "torch": torch.__version__, "results": results,
                      "ops": opkiln.build_info()["ops"]}))
""")


def _run(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), *args], capture_output=True, text=True, timeout=600)


def test_cpu_wheel_installs_with_its_dependencies_and_runs(cpu_wheel: Path, torch213_venv: Path) -> None:
    install = _run(torch213_venv, "-m", "pip", "install", str(cpu_wheel))
    assert install.returncode == 0, install.stderr
    # The torch pin is met by the torch 2.13.0 already there: nothing else is installed.
    assert "Requirement already satisfied: torch" in install.stdout
    run = _run(torch213_venv, "-c", EXERCISE_ALL_OPS)
    assert run.returncode == 0, run.stderr
    assert '"weighted_sum": [0.25, 0.25, 0.25, 0.25, 0.25]' in run.stdout
    assert '"torch": "2.13.0+cpu"' in run.stdout


def test_cuda_wheel_installs_beside_torch_214_and_runs_on_cpu(cuda_wheel: Path, torch214_venv: Path) -> None:
    install = _run(torch214_venv, "-m", "pip", "install", "--no-deps", "--force-reinstall", str(cuda_wheel))
    assert install.returncode == 0, install.stderr
    run = _run(torch214_venv, "-c", EXERCISE_ALL_OPS)
    assert run.returncode == 0, run.stderr
    assert '"torch": "2.14.1+cu130"' in run.stdout
    assert "pt214cu130" in run.stdout
