"""Fresh venvs with a real torch, for tests that install wheels the way users do."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from kiln_tool.venvs import PIP_REQUIREMENTS, ensure_venv, pinned

REPO = Path(__file__).resolve().parents[2]

CU130_VENV = REPO / ".venvs" / "torch2.14-cu130-py3.11"
# Why a test of the torch 2.14.1 half skips, and how to make it run (tests/stable/conftest.py lists them).
CU130_MISSING = (f"{CU130_VENV} is missing, so the torch 2.14.1 half did not run: create it with "
                 "`scripts/kiln venv --build cu130` (or `make setup`)")


def skip_without_cu130() -> None:
    if not (CU130_VENV / "bin" / "python").exists():
        pytest.skip(CU130_MISSING)


def site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def make_venv(path: Path, torch: str, extra: Sequence[str] = ()) -> Path:
    """A fresh venv at `path` with real torch (and the `extra` packages) and pip; returns its python.

    Made by uv, as kiln makes its venvs (kiln_tool.venvs): torch="2.13.0" installs that CPU
    build (seconds from uv's cache). torch="2.14.1" reuses the CUDA build venv's torch through
    a .pth file instead of reinstalling 3.7 GB: a fresh environment with the real torch.
    """
    packages = [f"pip=={pinned('pip', PIP_REQUIREMENTS)}", *extra]
    if torch == "2.14.1":
        skip_without_cu130()
    else:
        packages.insert(0, f"torch=={torch}")
    base = Path(getattr(sys, "_base_executable", sys.executable))
    python = ensure_venv(path, base, packages=packages)
    if torch == "2.14.1":
        (site_packages(path) / "torch_from_build_venv.pth").write_text(str(site_packages(CU130_VENV)) + "\n")
    return python
