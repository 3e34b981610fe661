"""exports: an API is told from a leak by evidence in the wheel, and the pass text says which evidence decided:
symbols the wheel's Python names (a pluggable allocator's malloc/free that torch looks up with dlsym), a public
SDK library (headers shipped, and a build helper in the wheel links code against it), a vendor runtime loaded from
a folder Python names (C-only exports). Without the evidence, the same libraries are errors. Built with gcc/g++."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from audit_corpus import PY_SUFFIX, make_wheel

from kiln_tool.audit import audit_paths
from kiln_tool.audit.report import CheckResult

EXTENSION = """
extern "C" {
__attribute__((visibility("default"))) void* PyInit_alloc(void) { return 0; }
__attribute__((visibility("default"))) void* kiln_malloc(long n, int d, void* s) { return (void*)(n + d); }
__attribute__((visibility("default"))) void kiln_free(void* p, long n, int d, void* s) {}
}
"""
SDK = """
namespace ksdk { __attribute__((visibility("default"))) int version() { return 3; } }
extern "C" __attribute__((visibility("default"))) int ksdk_version(void) { return ksdk::version(); }
"""
RUNTIME_C = 'extern "C" __attribute__((visibility("default"))) int vrt_init(int f) { return f; }\n'
RUNTIME_CXX = 'namespace vrt { __attribute__((visibility("default"))) int init(int f) { return f; } }\n'
ALLOCATOR_PY = b"""
import torch
def allocator(path):
    return torch.cuda.memory.CUDAPluggableAllocator(path, "kiln_malloc", "kiln_free")
"""
HELPER_PY = b"""
import os
from torch.utils import cpp_extension
def extension(name, sources):
    here = os.path.dirname(__file__)
    return cpp_extension.CppExtension(name, sources, include_dirs=[os.path.join(here, "include")],
                                      library_dirs=[os.path.join(here, "lib")], libraries=["ksdk"])
"""
RUNTIME_PY = b"""
import os
RUNTIME = os.path.join(os.path.dirname(__file__), "vendor_rt")
os.environ["LD_LIBRARY_PATH"] = RUNTIME + ":" + os.environ.get("LD_LIBRARY_PATH", "")
"""


def _so(tmp: Path, name: str, source: str) -> bytes:
    (tmp / f"{name}.cpp").write_text(source)
    subprocess.run(["g++", "-shared", "-fPIC", "-O1", "-fvisibility=hidden", "-Wl,-z,noexecstack", "-o", name,
                    f"{name}.cpp"], check=True, cwd=tmp, capture_output=True)
    return (tmp / name).read_bytes()


@pytest.fixture(scope="module")
def libs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    if shutil.which("g++") is None:
        pytest.skip("g++ is needed")
    tmp = tmp_path_factory.mktemp("api")
    return {"alloc": _so(tmp, "alloc.so", EXTENSION), "sdk": _so(tmp, "libksdk.so", SDK),
            "rt_c": _so(tmp, "libvrt.so", RUNTIME_C), "rt_cxx": _so(tmp, "libvrtx.so", RUNTIME_CXX)}


def _exports(tmp: Path, files: dict[str, bytes], member: str) -> CheckResult:
    tmp.mkdir(parents=True, exist_ok=True)
    (artifact,) = audit_paths([make_wheel(tmp, files)]).artifacts
    (lib,) = [lib for lib in artifact.libraries if lib.path == member]
    (check,) = [c for c in lib.checks if c.id == "exports"]
    return check


def test_symbols_python_names_for_lookup_by_name_are_an_api(libs: dict[str, bytes], tmp_path: Path) -> None:
    member = f"kilntest/alloc{PY_SUFFIX}"
    named = _exports(tmp_path / "a", {member: libs["alloc"], "kilntest/allocator.py": ALLOCATOR_PY}, member)
    assert named.ok, named.detail
    assert named.detail == ("exports PyInit_alloc and 2 symbol(s) the wheel's Python names for lookup by name (dlsym, "
                            "ctypes; evidence: kiln_free in kilntest/allocator.py, kiln_malloc in "
                            "kilntest/allocator.py)")
    unnamed = _exports(tmp_path / "b", {member: libs["alloc"]}, member)
    assert not unnamed.ok and "exports 2 symbol(s) besides PyInit_alloc: kiln_free, kiln_malloc" in unnamed.detail


def test_a_public_sdk_library_is_told_by_its_headers_and_build_helper(libs: dict[str, bytes], tmp_path: Path) -> None:
    member = "kilntest/lib/libksdk.so"
    sdk = {member: libs["sdk"], "kilntest/include/ksdk.h": b"int ksdk_version(void);\n",
           "kilntest/build_helper.py": HELPER_PY}
    check = _exports(tmp_path / "a", sdk, member)
    assert check.ok, check.detail
    assert check.detail == ("public SDK library: its 2 export(s) are its API (evidence: the wheel ships 1 header(s) "
                            "(e.g. kilntest/include/ksdk.h) and kilntest/build_helper.py links code against "
                            "libksdk.so)")
    for missing in ("kilntest/include/ksdk.h", "kilntest/build_helper.py"):
        partial = {k: v for k, v in sdk.items() if k != missing}
        check = _exports(tmp_path / missing.replace("/", "_"), partial, member)
        assert not check.ok and "no allowlist covers" in check.detail, missing


def test_a_runtime_loaded_from_a_folder_python_names_has_a_c_api(libs: dict[str, bytes], tmp_path: Path) -> None:
    member = "kilntest/vendor_rt/libvrt.so"
    check = _exports(tmp_path / "a", {member: libs["rt_c"], "kilntest/runtime.py": RUNTIME_PY}, member)
    assert check.ok, check.detail
    assert check.detail == ("a runtime loaded from its folder, which kilntest/runtime.py names: its C API of 1 "
                            "symbol(s) (vrt_init)")
    # C++ exports are no C API, whoever names the folder; nor is a folder Python never names evidence.
    cxx = _exports(tmp_path / "b", {"kilntest/vendor_rt/libvrtx.so": libs["rt_cxx"], "kilntest/runtime.py":
                                    RUNTIME_PY}, "kilntest/vendor_rt/libvrtx.so")
    assert not cxx.ok
    unnamed = _exports(tmp_path / "c", {member: libs["rt_c"]}, member)
    assert not unnamed.ok
