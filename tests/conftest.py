"""Shared fixtures: the repo, and real wheels built from it.

Wheels come from dist/ when `make wheels` (or `make test`) already put them
there; otherwise they are built once per session into tests/_artifacts/.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "tests" / "_artifacts"
CU130_VENV = REPO / ".venvs" / "torch2.14-cu130-py3.11"


def _find(pattern: str) -> Path | None:
    hits = sorted((REPO / "dist").glob(pattern)) + sorted((ARTIFACTS / "wheels").glob(pattern))
    return hits[-1] if hits else None


def _build(python: Path, variant: str, pattern: str) -> Path:
    out = ARTIFACTS / "wheels"
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OPKILN_VARIANT=variant)
    build_dir = ARTIFACTS / f"build-{variant}-{python.parent.parent.name}"
    subprocess.run(
        [str(python), "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-q", "-w", str(out),
         "-C", f"build-dir={build_dir}", str(REPO)],
        check=True, env=env,
    )
    found = _find(pattern)
    assert found is not None, f"built a {variant} wheel but found none matching {pattern}"
    return found


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def cpu_wheel() -> Path:
    """The torch 2.13 CPU wheel (built with the dev venv's torch if dist/ has none)."""
    return _find("opkiln-*+pt213cpu-*.whl") or _build(Path(sys.executable), "cpu", "opkiln-*+pt213cpu-*.whl")


@pytest.fixture(scope="session")
def cuda_wheel() -> Path:
    """The torch 2.14 CUDA 13.0 wheel; skipped where no CUDA build venv exists."""
    found = _find("opkiln-*+pt214cu130-*.whl")
    if found:
        return found
    python = CU130_VENV / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no CUDA wheel in dist/ and no {CU130_VENV} to build one (make wheels VARIANT=cu130)")
    return _build(python, "cuda", "opkiln-*+pt214cu130-*.whl")
