"""Shared fixtures: the repo, and real wheels built from it.

Wheels come from dist/ when `make wheels` (or `make test`) put them there
(repaired and audited, as shipped); otherwise they are built once per session
into tests/_artifacts/ (plain scikit-build-core output).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from adopters.fixtures import (  # noqa: F401 - the adopters' session fixtures, shared by every test folder
    kiln_tool,
    maintainer_python,
    ringops_clone,
    ringops_cpu,
    ringops_cu130,
    segops_clone,
    segops_cpu,
    twinlibs_clone,
    twinlibs_cpu,
)
from kiln_tool.matrix_data import local_builds
from kiln_tool.pipeline import build_wheel
from support import cpu_time
from support.dist_wheels import find_dist, newest_source
from support.lanes import pytest_addoption, pytest_runtestloop, pytest_terminal_summary  # noqa: F401 - hooks
from support.venvs import CU130_VENV, make_venv, skip_without_cu130

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "tests" / "_artifacts"


def pytest_configure(config: pytest.Config) -> None:
    """Each test's CPU seconds (tests/support/cpu_time.py): in the JUnit report and the summary."""
    if not config.pluginmanager.has_plugin("kiln-cpu-time"):
        config.pluginmanager.register(cpu_time, "kiln-cpu-time")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked after_suite run last, in their own order: they stand on what the other tests built."""
    items.sort(key=lambda item: item.get_closest_marker("after_suite") is not None)


def build_test_wheel(name: str, python: Path, cuda_tag: str, env: dict[str, str] | None = None) -> Path:
    """Build this checkout with kiln's own build step (pipeline.build_wheel, no repair) and `python`'s torch.

    The wheel goes to tests/_artifacts/wheels-<name>, replacing what an earlier session left there when it
    predates the sources or was built otherwise; `env` adds to the combination's build environment, e.g.
    KILN_ABI_MODE=stable or KILN_CUDA_ARCHS. make test runs two pytest processes at once, and both may want
    the same wheel: a lock per name makes one build it while the other waits, then takes it.
    """
    (spec,) = [s for s in local_builds() if s.cuda == cuda_tag]
    out = ARTIFACTS / f"wheels-{name}"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    recipe = json.dumps({"python": str(python), "cuda": cuda_tag, "env": env or {}}, sort_keys=True)
    with (ARTIFACTS / f"wheels-{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        made = out / ".built-from"
        wheels = sorted(out.glob("*.whl"))
        if len(wheels) == 1 and made.is_file() and made.read_text() == recipe \
                and made.stat().st_mtime > newest_source():
            return wheels[0]
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        wheel = build_wheel(python, spec, out, ARTIFACTS / f"build-{name}.log", ARTIFACTS / f"build-{name}", env)
        made.write_text(recipe)
        return wheel


def _cu130_python() -> Path:
    skip_without_cu130()
    return CU130_VENV / "bin" / "python"


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def cpu_wheel() -> Path:
    """The torch 2.13 CPU wheel (built with the dev venv's torch if dist/ has none)."""
    return find_dist("opkiln-*+pt213cpu-*.whl") or build_test_wheel("cpu", Path(sys.executable), "cpu")


@pytest.fixture(scope="session")
def unrepaired_cpu_wheel(cpu_wheel: Path) -> Path:
    """The CPU wheel as the build step writes it (linux_x86_64, before repair): cpu_wheel when that is one,
    else built here, since dist/ holds repaired wheels after `make wheels` (as in CI)."""
    if "manylinux" not in cpu_wheel.name:
        return cpu_wheel
    return build_test_wheel("cpu-unrepaired", Path(sys.executable), "cpu")


@pytest.fixture(scope="session")
def cuda_wheel() -> Path:
    """The torch 2.14 CUDA 13.0 wheel; skipped where no CUDA build venv exists."""
    return find_dist("opkiln-*+pt214cu130-*.whl") or build_test_wheel("cu130", _cu130_python(), "cu130")


@pytest.fixture(scope="session")
def cpu214_wheel() -> Path:
    """CPU kernels built on purpose against the CUDA torch 2.14.1 (KILN_VARIANT=cpu): +pt214cpu."""
    return build_test_wheel("cpu214", _cu130_python(), "cu130", {"KILN_VARIANT": "cpu"})


@pytest.fixture(scope="session")
def stable_cpu_wheel() -> Path:
    """The CPU stable-ABI wheel (opkiln-<v>+cpu-cp310-abi3-linux_x86_64.whl), built with the dev venv's torch."""
    return build_test_wheel("stable-cpu", Path(sys.executable), "cpu", {"KILN_ABI_MODE": "stable"})


@pytest.fixture(scope="session")
def stable_cu130_wheel() -> Path:
    """The CUDA 13.0 stable-ABI wheel, built with the CUDA build venv's torch 2.14.1 headers and nvcc 13.0
    (one arch, 9.0+PTX, unless KILN_CUDA_ARCHS says otherwise: the tests read the library, not the GPU code)."""
    archs = os.environ.get("KILN_CUDA_ARCHS") or "9.0+PTX"
    return build_test_wheel("stable-cu130", _cu130_python(), "cu130",
                            {"KILN_ABI_MODE": "stable", "KILN_CUDA_ARCHS": archs})


@pytest.fixture(scope="session")
def torch213_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Python of a fresh venv holding torch 2.13.0 (CPU) and nothing else."""
    return make_venv(tmp_path_factory.mktemp("venv-torch213") / "venv", "2.13.0")


@pytest.fixture(scope="session")
def torch214_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Python of a fresh venv seeing torch 2.14.1+cu130 (from the CUDA build venv)."""
    return make_venv(tmp_path_factory.mktemp("venv-torch214") / "venv", "2.14.1")
