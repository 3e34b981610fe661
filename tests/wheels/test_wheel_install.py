"""`pip install dist/<wheel>` into a fresh venv with the matching torch, then every op works."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from kiln_tool.op_smoke import EXERCISE, exercise_args, install_samples
from kiln_tool.project import load_project

REPO = Path(__file__).resolve().parents[2]


def _exercise(python: Path) -> subprocess.CompletedProcess[str]:
    return _run(python, "-c", EXERCISE, *exercise_args(load_project(REPO)))


def test_every_public_op_of_opkiln_has_an_install_sample(torch213_venv: Path, cpu_wheel: Path) -> None:
    """Python-only ops (batched_nms) too: the smoke's own rule covers the build manifest's ops only."""
    project = load_project(REPO)
    assert project.install_samples == REPO / "tests" / "ops"
    samples = install_samples(project.install_samples)
    install = _run(torch213_venv, "-m", "pip", "install", "--no-deps", "--force-reinstall", str(cpu_wheel))
    assert install.returncode == 0, install.stderr
    public = _run(torch213_venv, "-c", "import json, opkiln; print(json.dumps(opkiln.ops.__all__))")
    assert public.returncode == 0, public.stderr
    assert sorted(set(json.loads(public.stdout)) - set(samples)) == []


def _run(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), *args], capture_output=True, text=True, timeout=600)


def test_cpu_wheel_installs_with_its_dependencies_and_runs(cpu_wheel: Path, torch213_venv: Path) -> None:
    install = _run(torch213_venv, "-m", "pip", "install", str(cpu_wheel))
    assert install.returncode == 0, install.stderr
    # The torch pin is met by the torch 2.13.0 already there: nothing else is installed.
    assert "Requirement already satisfied: torch" in install.stdout
    run = _exercise(torch213_venv)
    assert run.returncode == 0, run.stderr
    assert '"weighted_sum": [0.25, 0.25, 0.25, 0.25, 0.25]' in run.stdout
    assert '"torch": "2.13.0+cpu"' in run.stdout


def test_cuda_wheel_installs_beside_torch_214_and_runs_on_cpu(cuda_wheel: Path, torch214_venv: Path) -> None:
    install = _run(torch214_venv, "-m", "pip", "install", "--no-deps", "--force-reinstall", str(cuda_wheel))
    assert install.returncode == 0, install.stderr
    run = _exercise(torch214_venv)
    assert run.returncode == 0, run.stderr
    assert '"torch": "2.14.1+cu130"' in run.stdout
    assert "pt214cu130" in run.stdout
