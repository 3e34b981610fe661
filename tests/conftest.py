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

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "tests" / "_artifacts"
CU130_VENV = REPO / ".venvs" / "torch2.14-cu130-py3.11"


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


def _site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def make_venv(path: Path, torch: str) -> Path:
    """A fresh venv at `path` with real torch; returns its python.

    torch="2.13.0" pip-installs that CPU build from local disk (~30 s).
    torch="2.14.1" reuses the CUDA build venv's torch through a .pth file
    instead of reinstalling 3.7 GB: a fresh environment with the real torch.
    """
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    python = path / "bin" / "python"
    if torch == "2.14.1":
        if not CU130_VENV.exists():
            pytest.skip(f"{CU130_VENV} is missing (make wheels VARIANT=cu130 creates it)")
        (_site_packages(path) / "torch_from_build_venv.pth").write_text(str(_site_packages(CU130_VENV)) + "\n")
    else:
        subprocess.run([str(python), "-m", "pip", "install", "-q", f"torch=={torch}"], check=True)
    return python


@pytest.fixture(scope="session")
def torch213_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Python of a fresh venv holding torch 2.13.0 (CPU) and nothing else."""
    return make_venv(tmp_path_factory.mktemp("venv-torch213") / "venv", "2.13.0")


@pytest.fixture(scope="session")
def torch214_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Python of a fresh venv seeing torch 2.14.1+cu130 (from the CUDA build venv)."""
    return make_venv(tmp_path_factory.mktemp("venv-torch214") / "venv", "2.14.1")
