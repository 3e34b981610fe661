"""Session fixtures for the preflight/doctor scenarios (how the venvs are made: see preflight_support)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from preflight.preflight_support import (
    CU130_VENV,
    TORCH_213,
    WORK,
    Venv,
    fresh_venv,
    install_wheel,
    site_packages,
)


@pytest.fixture(scope="session")
def torch213_site() -> Path:
    """site-packages of a venv holding only the real torch 2.13.0 CPU (installed once, then reused)."""
    base = WORK / "base-torch2.13"
    marker = base / ".ready"
    if not marker.exists():
        if base.exists():
            shutil.rmtree(base)
        subprocess.run([sys.executable, "-m", "venv", str(base)], check=True)
        subprocess.run([str(base / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        f"torch=={TORCH_213}"], check=True, timeout=900)
        marker.write_text(TORCH_213)
    return site_packages(base)


@pytest.fixture(scope="session")
def torch214_site() -> Path:
    """site-packages of the CUDA build venv: the real torch 2.14.1+cu130 with its CUDA runtime wheels."""
    site = site_packages(CU130_VENV)
    if not (site / "torch").is_dir():
        pytest.skip(f"no torch 2.14.1+cu130 venv at {CU130_VENV}")
    return site


@pytest.fixture(scope="session")
def make_venv() -> Callable[[str, Path, Path], Venv]:
    """make_venv(name, torch_site, wheel): a fresh venv with that torch and that opkiln wheel, once per session."""
    made: dict[str, Venv] = {}

    def make(name: str, torch_site: Path, wheel: Path) -> Venv:
        if name not in made:
            venv = fresh_venv(WORK / name, torch_site)
            install_wheel(venv, wheel)
            made[name] = venv
        return made[name]

    return make


@pytest.fixture(scope="session")
def good_venv(make_venv, torch213_site: Path, cpu_wheel: Path) -> Venv:
    """The matching combination: torch 2.13.0 CPU + the torch 2.13 CPU wheel."""
    return make_venv("good-torch2.13-cpu", torch213_site, cpu_wheel)
