"""Shared fixtures: the repo, and real wheels built from it.

Wheels come from dist/ when `make wheels` (or `make test`) put them there
(repaired and audited, as shipped); otherwise they are built once per session
into tests/_artifacts/ (plain scikit-build-core output).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.venvs import CU130_VENV, make_venv

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "tests" / "_artifacts"


def _find(pattern: str, where: Path = REPO / "dist") -> Path | None:
    hits = sorted(where.glob(pattern))
    return hits[-1] if hits else None


def _build(python: Path, variant: str, pattern: str) -> Path:
    out = ARTIFACTS / "wheels"
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob(pattern):  # a wheel from an earlier session may predate the sources
        stale.unlink()
    env = dict(os.environ, OPKILN_VARIANT=variant)
    build_dir = ARTIFACTS / f"build-{variant}-{python.parent.parent.name}"
    subprocess.run(
        [str(python), "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-q", "-w", str(out),
         "-C", f"build-dir={build_dir}", str(REPO)],
        check=True, env=env,
    )
    found = _find(pattern, out)
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


@pytest.fixture(scope="session")
def torch213_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Python of a fresh venv holding torch 2.13.0 (CPU) and nothing else."""
    return make_venv(tmp_path_factory.mktemp("venv-torch213") / "venv", "2.13.0")


@pytest.fixture(scope="session")
def torch214_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Python of a fresh venv seeing torch 2.14.1+cu130 (from the CUDA build venv)."""
    return make_venv(tmp_path_factory.mktemp("venv-torch214") / "venv", "2.14.1")
