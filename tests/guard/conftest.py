"""Fixtures of the import guard tests: the adopters' fixture projects built by the installed tool (the same
session fixtures as tests/adopters: kiln_tool, ringops_cpu, twinlibs_cpu) and small venvs that hold one of their
wheels beside a real torch (tests/preflight's way: a .pth file to a shared torch install, pip --no-deps)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from preflight.conftest import torch213_site, torch214_site  # noqa: F401 - the same torches as tests/preflight
from preflight.preflight_support import ARTIFACTS, Venv, fresh_venv

WORK = ARTIFACTS / "guard"


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
