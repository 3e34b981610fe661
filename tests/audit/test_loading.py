"""Libraries loaded by name (ctypes) are judged by how they are loaded: no import, their C API intended and
their leaked C++ internals not; per-CUDA-major variants (*_cu12.so beside *_cu13.so) are checked against the
torch whose CUDA they are for, the others said to be for another CUDA. Built from tiny sources."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from audit_corpus import HARDENED, make_wheel
from hypothesis import given
from hypothesis import strategies as st

from kiln_tool.audit import CheckResult, audit_paths
from kiln_tool.audit import target as target_module
from kiln_tool.audit.loading import loaded_by_name, variants
from kiln_tool.audit.torch_abi import load_recorded

C_API = """
extern int cudaGetDeviceCount(int *count);
__attribute__((visibility("default"))) int ckiln_devices(void) { int n = 0; return cudaGetDeviceCount(&n) ? -1 : n; }
"""
LEAKY = 'extern "C" {' + C_API + '}\nint kiln_internal(int x) { return x + 1; }\n'  # C++: its internals leak
LOADER = b"""
import ctypes, pathlib
def load(backend: str) -> ctypes.CDLL:
    return ctypes.CDLL(str(pathlib.Path(__file__).parent / f"libkilnops_{backend}.so"))
"""


def _lib(tmp: Path, name: str, source: str, cudart: str, cxx: bool = False) -> bytes:
    stub = tmp / cudart
    if not stub.exists():
        (tmp / "cudart.c").write_text("int cudaGetDeviceCount(int *c) { *c = 0; return 0; }\n")
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(stub), "cudart.c", f"-Wl,-soname,{cudart}"], check=True,
                       cwd=tmp)
    src = tmp / (name + (".cpp" if cxx else ".c"))
    src.write_text(source)
    flags = [flag for flag in HARDENED if flag != "-fvisibility=hidden"] if cxx else HARDENED
    subprocess.run(["g++" if cxx else "gcc", "-shared", "-o", str(tmp / name), src.name, *flags, f"-L{tmp}",
                    f"-l:{cudart}"], check=True, capture_output=True, cwd=tmp)
    return (tmp / name).read_bytes()


def _checks(lib: object, check_id: str) -> list[CheckResult]:
    return [c for c in lib.checks if c.id == check_id]  # type: ignore[attr-defined]


def test_ctypes_variants(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if shutil.which("gcc") is None or shutil.which("g++") is None:
        pytest.skip("gcc/g++ are needed")
    if load_recorded("2.14.1+cu130") is None:
        pytest.skip("torch 2.14.1+cu130 is not recorded")
    monkeypatch.setattr(target_module, "candidate_lib_dirs", lambda: [])
    (tmp_path / "cu12").mkdir()
    (tmp_path / "cu13").mkdir()
    files = {
        "kilnops/loader.py": LOADER,
        "kilnops/libkilnops_cu12.so": _lib(tmp_path / "cu12", "libkilnops_cu12.so", C_API, "libcudart.so.12"),
        "kilnops/libkilnops_cu13.so": _lib(tmp_path / "cu13", "libkilnops_cu13.so", LEAKY, "libcudart.so.13", cxx=True),
    }
    wheel = make_wheel(tmp_path, files, requires=("torch==2.14.1",))
    (artifact,) = audit_paths([wheel]).artifacts
    assert "2.14.1+cu130" in str(artifact.target["torch"])
    libs = {lib.path: lib for lib in artifact.libraries}
    cu12, cu13 = libs["kilnops/libkilnops_cu12.so"], libs["kilnops/libkilnops_cu13.so"]

    (exports12,) = _checks(cu12, "exports")
    assert exports12.ok and "loaded by name by kilnops/loader.py" in exports12.detail
    assert "C API of 1 symbol(s) (ckiln_devices)" in exports12.detail
    (exports13,) = _checks(cu13, "exports")
    assert not exports13.ok and "_Z13kiln_internali" in exports13.detail and "import" not in exports13.detail
    assert "C API of 1 symbol(s) (ckiln_devices)" in exports13.detail

    # cu12 is for CUDA 12 torches: said so, not an error; cu13 is checked against torch's libcudart.so.13.
    results12 = {c.finding: c for c in _checks(cu12, "undefined-symbols")}
    assert results12[""].ok and results12["variant"].severity == "warning"
    assert "the CUDA 12 variant among 2 per-platform libraries" in results12["variant"].detail
    assert "libcudart.so.12" in results12["variant"].detail and "CUDA 13" in results12["variant"].detail
    (result13,) = _checks(cu13, "undefined-symbols")
    assert result13.ok and "1 from libcudart.so.13" in result13.detail
    assert all("libcudart" not in c.detail for c in artifact.checks if not c.ok)


@given(st.lists(st.sampled_from(["cu11", "cu12", "cu13", "cuda118", "cuda130", "rocm64", "cpu", "xpu2025"]),
                min_size=1, max_size=6, unique=True))
def test_variant_families(tags: list[str]) -> None:
    members = [f"pkg/libops_{t}.so" for t in tags] + ["pkg/libother.so"]
    found = variants(members, lambda member: [])
    with_version = [m for m in members if not m.endswith(("_cpu.so", "libother.so"))]
    if len(with_version) >= 2:
        assert set(found) == set(with_version)
        for member, variant in found.items():
            assert variant.family == tuple(sorted(with_version))
            if "_cu" in member:
                assert variant.platform == "cuda" and variant.cuda_major in (11, 12, 13)
    else:
        assert found == {}


def test_loaded_by_name_needs_a_loader_call() -> None:
    libs = ["pkg/libkilnops_cu12.so", "pkg/libkilnopsx.so", "pkg/_C.so"]
    assert loaded_by_name({"pkg/a.py": LOADER}, libs) == {"pkg/libkilnops_cu12.so": "pkg/a.py"}
    assert loaded_by_name({"pkg/a.py": b'NAME = "libkilnops_cu12.so"\n'}, libs) == {}


def test_loaded_by_name_across_modules() -> None:
    """torch-memory-saver's layout: one module calls ctypes.CDLL(path), another names the library stem."""
    files = {"pkg/binary_wrapper.py": b"import ctypes\ndef load(p):\n    return ctypes.CDLL(p)\n",
             "pkg/hooks/mode_torch.py": b'STEM = "pkg_hook_mode_torch"\n'}
    libs = ["pkg_hook_mode_torch_cu12.abi3.so", "pkg_hook_mode_torch.abi3.so", "pkg_other.abi3.so"]
    assert loaded_by_name(files, libs) == {"pkg_hook_mode_torch_cu12.abi3.so": "pkg/hooks/mode_torch.py",
                                           "pkg_hook_mode_torch.abi3.so": "pkg/hooks/mode_torch.py"}


def test_unsuffixed_build_is_one_of_the_family() -> None:
    needed = {"x_cu12.abi3.so": ["libcudart.so.12"], "x_cu13.abi3.so": ["libcudart.so.13"],
              "x.abi3.so": ["libcudart.so.12"], "y_cu12.so": [], "y_cu13.so": [], "y.so": []}
    found = variants(sorted(needed), lambda member: needed[member])
    assert found["x.abi3.so"].platform == "cuda" and found["x.abi3.so"].cuda_major == 12
    assert found["x_cu13.abi3.so"].family == ("x.abi3.so", "x_cu12.abi3.so", "x_cu13.abi3.so")
    assert found["y.so"].platform == "default" and found["y.so"].cuda_major is None
