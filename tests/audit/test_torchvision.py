"""Real third-party wheels: what the audit finds in torchvision 0.29.1 and 0.28.0 (cached in tests/_artifacts)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from audit_corpus import REPO

from kiln_tool.audit import AuditOptions, CheckResult, audit_paths
from kiln_tool.audit.target import candidate_lib_dirs, torch_version_at

CACHE = REPO / "tests" / "_artifacts" / "torchvision"


def torchvision_wheel(version: str) -> Path:
    pattern = f"torchvision-{version}-cp311-cp311-manylinux_*_x86_64.whl"
    found = sorted(CACHE.glob(pattern))
    if not found:
        CACHE.mkdir(parents=True, exist_ok=True)
        fetch = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--python-version", "3.11",
                                "--only-binary=:all:", "--platform", "manylinux_2_28_x86_64",
                                f"torchvision=={version}", "-d", str(CACHE)], capture_output=True, text=True,
                               timeout=600)
        found = sorted(CACHE.glob(pattern))
        if fetch.returncode != 0 or not found:
            pytest.skip(f"cannot download torchvision {version}: {fetch.stderr.strip()[-300:]}")
    return found[-1]


def cu130_torch_lib() -> Path | None:
    for lib in candidate_lib_dirs():
        version = torch_version_at(lib) or ""
        if version.startswith("2.14.") and "+cu13" in version:
            return lib
    return None


def by_library(path: Path, options: AuditOptions | None = None) -> dict[str, dict[str, CheckResult]]:
    (artifact,) = audit_paths([path], options).artifacts
    result = {lib.path: {c.id: c for c in lib.checks if not c.finding} for lib in artifact.libraries}
    result["(wheel)"] = {c.id: c for c in artifact.checks if not c.finding}
    return result


def test_torchvision_0_29_1() -> None:
    checks = by_library(torchvision_wheel("0.29.1"))
    ops = checks["torchvision/_C_stable.so"]
    assert not ops["rpath"].ok and "'/__w/_temp/conda_environment_" in ops["rpath"].detail
    assert not ops["exports"].ok  # C++ helpers (c10::HeaderOnlyArrayRef...) exported, no version script
    assert not ops["build-paths"].ok and "/__w/vision/vision/" in ops["build-paths"].detail
    assert not checks["torchvision/image_stable.so"]["exports"].ok  # giflib's DGif* re-exported
    for library, results in checks.items():
        if library != "(wheel)":
            assert results["elf-valid"].ok and results["symbol-versions"].ok and results["textrel"].ok, library
            assert results["exec-stack"].ok, library
    assert checks["(wheel)"]["record"].ok and checks["(wheel)"]["wheel-tag"].ok
    assert ops["cuda-sass"].ok  # no arch list requested: the manifest is reported
    if cu130_torch_lib() is not None:
        assert ops["undefined-symbols"].ok, ops["undefined-symbols"].detail
        assert ops["cxx11-abi"].ok


def test_torchvision_0_28_0() -> None:
    wheel = torchvision_wheel("0.28.0")
    checks = by_library(wheel)
    ops = checks["torchvision/_C.so"]
    assert not ops["rpath"].ok and not ops["exports"].ok and not ops["build-paths"].ok
    assert checks["(wheel)"]["record"].ok
    lib = cu130_torch_lib()
    if lib is None:
        pytest.skip("no torch 2.14 CUDA 13 venv to audit against")
    # Built for torch 2.13 (CUDA): against torch 2.14.1 one c10::cuda symbol is gone.
    against_214 = by_library(wheel, AuditOptions(torch_lib=lib))["torchvision/_C.so"]["undefined-symbols"]
    assert not against_214.ok
    assert "_ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_jb" in against_214.detail
