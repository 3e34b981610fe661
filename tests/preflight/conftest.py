"""Session fixtures for the preflight/doctor scenarios (how the venvs are made: see preflight_support)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from preflight.preflight_support import (
    CU130_VENV,
    WORK,
    Venv,
    fresh_venv,
    install_wheel,
    shared_torch213_site,
    site_packages,
)


@pytest.fixture(scope="session")
def torch213_site() -> Path:
    """site-packages of a venv holding only the real torch 2.13.0 CPU (installed once, then reused)."""
    return shared_torch213_site()


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
