"""Fresh venvs with a real torch, for tests that install wheels the way users do."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CU130_VENV = REPO / ".venvs" / "torch2.14-cu130-py3.11"


def site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def make_venv(path: Path, torch: str, extra: Sequence[str] = ()) -> Path:
    """A fresh venv at `path` with real torch (and the `extra` packages); returns its python.

    torch="2.13.0" pip-installs that CPU build from local disk (~30 s).
    torch="2.14.1" reuses the CUDA build venv's torch through a .pth file
    instead of reinstalling 3.7 GB: a fresh environment with the real torch.
    """
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    python = path / "bin" / "python"
    packages = list(extra)
    if torch == "2.14.1":
        if not CU130_VENV.exists():
            pytest.skip(f"{CU130_VENV} is missing (make wheels VARIANT=cu130 creates it)")
        (site_packages(path) / "torch_from_build_venv.pth").write_text(str(site_packages(CU130_VENV)) + "\n")
    else:
        packages.insert(0, f"torch=={torch}")
    if packages:
        subprocess.run([str(python), "-m", "pip", "install", "-q", *packages], check=True)
    return python
