"""Fixtures of the stable-ABI tests: one CPU stable wheel, and fresh venvs to install it into.

The wheel is built once per session into tests/_artifacts/stable-wheels (its own
build dir, never dist/); the same file then goes into a venv with torch 2.13.0
and one with torch 2.14.1.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.venvs import CU130_VENV, make_venv

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "tests" / "_artifacts"
STABLE_WHEELS = ARTIFACTS / "stable-wheels"



def build_stable_wheel(python: Path, variant: str, local: str, build_dir: Path,
                       extra_env: dict[str, str] | None = None) -> Path:
    """Build the stable-ABI wheel of `variant` with `python`'s torch; return the one file it made."""
    STABLE_WHEELS.mkdir(parents=True, exist_ok=True)
    pattern = f"opkiln-*+{local}-cp310-abi3-*.whl"
    for old in STABLE_WHEELS.glob(pattern):
        old.unlink()
    env = dict(os.environ, OPKILN_ABI_MODE="stable", OPKILN_VARIANT=variant, **(extra_env or {}))
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", "2")
    subprocess.run(
        [str(python), "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-q", "-w", str(STABLE_WHEELS),
         "-C", f"build-dir={build_dir}", str(REPO)],
        check=True, env=env,
    )
    wheels = sorted(STABLE_WHEELS.glob(pattern))
    assert len(wheels) == 1, f"expected one wheel matching {pattern}, found {[w.name for w in wheels]}"
    return wheels[0]


@pytest.fixture(scope="session")
def stable_cpu_wheel() -> Path:
    """The CPU stable-ABI wheel (opkiln-<v>+cpu-cp310-abi3-linux_x86_64.whl), built with the dev venv's torch."""
    return build_stable_wheel(Path(sys.executable), "cpu", "cpu", ARTIFACTS / "build-stable-cpu")


@pytest.fixture(scope="session")
def stable_cu130_wheel() -> Path:
    """The CUDA 13.0 stable-ABI wheel, built with the CUDA build venv's torch 2.14.1 headers and nvcc 13.0
    (one arch, 9.0+PTX, unless OPKILN_CUDA_ARCHS says otherwise: the tests read the library, not the GPU code)."""
    python = CU130_VENV / "bin" / "python"
    if not python.exists():
        pytest.skip(f"{CU130_VENV} is missing (make wheels VARIANT=cu130 creates it)")
    archs = os.environ.get("OPKILN_CUDA_ARCHS") or "9.0+PTX"
    return build_stable_wheel(python, "cuda", "cu130", ARTIFACTS / "build-stable-cu130",
                              {"OPKILN_CUDA_ARCHS": archs})


def make_test_venv(path: Path, torch: str) -> Path:
    """A fresh venv with torch `torch` and pytest; returns its python."""
    return make_venv(path, torch, extra=["pytest"])


@pytest.fixture(scope="session", params=["2.13.0", "2.14.1"], ids=lambda v: f"torch{v}")
def stable_venv(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                stable_cpu_wheel: Path) -> Path:
    """Python of a fresh venv with one torch and the CPU stable wheel (the same file for every torch)."""
    torch: str = request.param
    python = make_test_venv(tmp_path_factory.mktemp(f"stable-torch{torch}") / "venv", torch)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(stable_cpu_wheel)], check=True)
    return python
