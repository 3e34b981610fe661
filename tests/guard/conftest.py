"""Fixtures of the import guard tests: the adopters' fixture projects built by the installed tool (the same
session fixtures as tests/adopters: kiln_tool, ringops_cpu, twinlibs_cpu) and small venvs that hold one of their
wheels beside a real torch (tests/preflight's way: a .pth file to a shared torch install, pip --no-deps)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from preflight.preflight_support import ARTIFACTS, CU130_VENV, Venv, fresh_venv, shared_torch213_site, site_packages

WORK = ARTIFACTS / "guard"


@pytest.fixture(scope="session")
def torch213_site() -> Path:
    return shared_torch213_site()


@pytest.fixture(scope="session")
def torch214_site() -> Path:
    """The CUDA build venv's torch 2.14.1+cu130 (with its CUDA runtime wheels): the mismatched torch."""
    site = site_packages(CU130_VENV)
    if not (site / "torch").is_dir():
        pytest.skip(f"no torch 2.14.1+cu130 venv at {CU130_VENV}")
    return site


@pytest.fixture(scope="session")
def wheel_venv() -> Callable[[str, Path, Path], Venv]:
    """wheel_venv(name, torch_site, wheel): a fresh venv with that torch and that wheel (pip --no-deps: the torch
    pin would refuse a mismatched torch, the user mistake under test), once per session."""
    made: dict[str, Venv] = {}

    def make(name: str, torch_site: Path, wheel: Path) -> Venv:
        if name not in made:
            venv = fresh_venv(WORK / name, torch_site)
            subprocess.run([sys.executable, "-m", "pip", "--python", str(venv.python), "install", "--no-deps",
                            "--no-compile", "--disable-pip-version-check", "-q", str(wheel)], check=True)
            made[name] = venv
        return made[name]

    return make
