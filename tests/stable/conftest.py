"""Fixtures of the stable-ABI tests: fresh venvs to install the CPU stable wheel into.

The wheels themselves (stable_cpu_wheel, stable_cu130_wheel) are built once per
session by tests/conftest.py; the same CPU file goes into a venv with torch 2.13.0
and one with torch 2.14.1. Without the torch 2.14.1 build venv the tests of that half
skip, each with support.venvs.CU130_MISSING, and the session's summary lists them
under a banner: a run that checked only torch 2.13 says so.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kiln_tool.venvs import pinned
from support.venvs import CU130_MISSING, make_venv

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "tests" / "_artifacts"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    skipped = [r.nodeid for r in terminalreporter.stats.get("skipped", []) if CU130_MISSING in str(r.longrepr)]
    if skipped:
        terminalreporter.section(f"torch 2.14.1 half NOT RUN: {len(skipped)} test(s) skipped", sep="!",
                                 yellow=True, bold=True)
        for nodeid in skipped:
            terminalreporter.line(f"  {nodeid}")
        terminalreporter.line(CU130_MISSING, yellow=True, bold=True)


def make_test_venv(path: Path, torch: str) -> Path:
    """A fresh venv with torch `torch` and pytest (the suite's pin); returns its python."""
    return make_venv(path, torch, extra=[f"pytest=={pinned('pytest', REPO / 'requirements' / 'test.txt')}"])


@pytest.fixture(scope="session", params=["2.13.0", "2.14.1"], ids=lambda v: f"torch{v}")
def stable_venv(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                stable_cpu_wheel: Path) -> Path:
    """Python of a fresh venv with one torch and the CPU stable wheel (the same file for every torch)."""
    torch: str = request.param
    python = make_test_venv(tmp_path_factory.mktemp(f"stable-torch{torch}") / "venv", torch)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(stable_cpu_wheel)], check=True)
    return python
