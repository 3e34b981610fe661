"""`pip install dist/<wheel>` into a fresh venv with the matching torch, then every op works."""

from __future__ import annotations

import ast
import json
import subprocess
import textwrap
from pathlib import Path

OPS_TESTS = Path(__file__).resolve().parents[1] / "ops"


def install_samples() -> dict[str, str]:
    """Each op's INSTALL_SAMPLES (op name -> a Python expression), from its test file in tests/ops.

    Read as literals, not imported: the op's test is the one place that adding an op
    touches (docs/adding-an-op.md), and this test needs nothing else from it.
    """
    samples: dict[str, str] = {}
    for test_file in sorted(OPS_TESTS.glob("test_*.py")):
        for node in ast.parse(test_file.read_text()).body:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "INSTALL_SAMPLES"):
                found = ast.literal_eval(node.value)
                assert not set(found) & set(samples), f"{test_file.name}: an op with two install samples"
                samples.update(found)
    return samples


# Runs inside the fresh venv: every public op in opkiln.ops.__all__ must have a
# sample (INSTALL_SAMPLES in its tests/ops file) and must run; a new op without one fails.
EXERCISE_ALL_OPS = textwrap.dedent("""
    import json, sys, torch, opkiln
    samples = json.loads(sys.argv[1])
    results = {}
    for name in opkiln.ops.__all__:
        if name not in samples:
            sys.exit(f"no sample for op {name}: add it to INSTALL_SAMPLES in its tests/ops/test_<op>.py")
        results[name] = eval(samples[name], {"torch": torch, "opkiln": opkiln}).tolist()
    print(json.dumps({"version": opkiln.__version__, "torch": torch.__version__, "results": results,
                      "ops": opkiln.build_info()["ops"]}))
""")


def _exercise(python: Path) -> subprocess.CompletedProcess[str]:
    return _run(python, "-c", EXERCISE_ALL_OPS, json.dumps(install_samples()))


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
