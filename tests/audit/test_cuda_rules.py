"""cuda-sass and cuda-ptx (audit/checks/cuda.py) case by case with the words a maintainer reads, on libraries
nvcc built: every requested arch present, SASS missing, PTX missing (and why the PTX there does not cover it),
no PTX at all, no arch list to compare, and a damaged .nv_fatbin."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from audit_corpus import NVCC, SOURCES, Corpus
from elftools.elf.elffile import ELFFile

from kiln_tool.audit import AuditOptions, CheckResult, audit_paths

pytestmark = pytest.mark.skipif(not NVCC.exists(), reason=f"nvcc is needed ({NVCC})")

SASS_FIX = ("build with CMAKE_CUDA_ARCHITECTURES / KILN_CUDA_ARCHS covering every requested arch "
            "(e.g. 80-real;90a-real;120), and check nvcc's -gencode flags are not overridden.")
PTX_FIX = ("emit PTX for the archs marked +PTX (CMake '120' instead of '120-real', nvcc -gencode "
           "arch=compute_120,code=compute_120).")
FOUND = "SASS sm_80, sm_90a; PTX compute_90a"


def _cuda(lib: Path, archs: str | None) -> tuple[CheckResult, CheckResult]:
    (library,) = audit_paths([lib], AuditOptions(cuda_archs=archs)).artifacts[0].libraries
    checks = {c.id: c for c in library.checks if c.id.startswith("cuda-")}
    return checks["cuda-sass"], checks["cuda-ptx"]


def test_every_requested_arch_there(corpus: Corpus) -> None:
    sass, ptx = _cuda(corpus["libcuda_80_90a.so"], "8.0;9.0a")
    assert sass.ok and sass.detail == f"SASS for every requested arch; found {FOUND}"
    assert ptx.ok and ptx.detail == "no PTX requested (no +PTX in --cuda-archs); found compute_90a"
    sass, ptx = _cuda(corpus["libcuda_mixed.so"], "8.0;12.0+PTX")
    assert not sass.ok  # 12.0 has PTX only there
    assert ptx.ok and ptx.detail == "PTX for compute_120"


def test_missing_sass_and_ptx_are_each_named_with_the_reason(corpus: Corpus) -> None:
    lib = corpus["libcuda_80_90a.so"]
    sass, ptx = _cuda(lib, "8.0+PTX;9.0;12.0+PTX")
    requested = "SASS sm_80, sm_90, sm_120; PTX compute_80, compute_120 (from --cuda-archs)"
    assert not sass.ok and sass.fix == SASS_FIX
    assert sass.detail == (f"{lib} lacks SASS for sm_90, sm_120: requested {requested}; found {FOUND}. Those GPUs "
                           "would JIT from PTX at first use (or fail).")
    assert not ptx.ok and ptx.fix == PTX_FIX
    why = "compute_90a is arch-specific: it JITs only on 9.0, never forward"
    assert ptx.detail == (f"{lib} lacks PTX compute_80 (asked by 8.0+PTX): {why}; compute_120 (asked by 12.0+PTX): "
                          f"{why}. Requested {requested}; found {FOUND}. GPUs newer than the newest SASS cannot run "
                          "it.")


def test_a_library_without_ptx_says_so(tmp_path: Path) -> None:
    (tmp_path / "kernel.cu").write_text(SOURCES["kernel.cu"])
    lib = tmp_path / "libsass_only.so"
    subprocess.run([str(NVCC), "-shared", "-o", str(lib), "kernel.cu", "-Xcompiler", "-fPIC", "-gencode",
                    "arch=compute_80,code=sm_80"], check=True, capture_output=True, cwd=tmp_path)
    sass, ptx = _cuda(lib, "8.0+PTX")
    assert sass.ok
    assert ptx.detail == (f"{lib} lacks PTX compute_80 (asked by 8.0+PTX): the library has no PTX at all. Requested "
                          "SASS sm_80; PTX compute_80 (from --cuda-archs); found SASS sm_80; PTX none. GPUs newer "
                          "than the newest SASS cannot run it.")
    assert _cuda(lib, "8.0")[1].detail == "no PTX requested (no +PTX in --cuda-archs); found none"


def test_without_an_arch_list_the_manifest_is_reported_not_judged(corpus: Corpus) -> None:
    note = f"found {FOUND}; no arch list to compare (pass --cuda-archs or ship build info)"
    sass, ptx = _cuda(corpus["libcuda_80_90a.so"], None)
    assert (sass.ok, sass.detail, ptx.ok, ptx.detail) == (True, note, True, note)


def test_a_damaged_fatbin_fails_both_checks(corpus: Corpus, tmp_path: Path) -> None:
    lib = tmp_path / "libdamaged.so"
    shutil.copy(corpus["libcuda_80_90a.so"], lib)
    with lib.open("rb") as fh:
        offset = ELFFile(fh).get_section_by_name(".nv_fatbin")["sh_offset"]
    data = bytearray(lib.read_bytes())
    data[offset:offset + 4] = b"\0\0\0\0"  # the container magic
    lib.write_bytes(bytes(data))
    (library,) = audit_paths([lib], AuditOptions(cuda_archs="8.0")).artifacts[0].libraries
    checks = {c.id: c for c in library.checks if c.id.startswith("cuda-")}
    assert library.cuda_manifest is None
    for check_id in ("cuda-sass", "cuda-ptx"):
        check = checks[check_id]
        assert not check.ok
        assert check.detail.startswith(f"{lib}: malformed .nv_fatbin (")
        assert check.detail.endswith("); the CUDA runtime cannot load its kernels.")
        assert check.fix == "rebuild: the section was damaged after nvcc wrote it (a bad strip or objcopy step?)."


@pytest.fixture(scope="module")
def two_ptx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SASS sm_80, PTX compute_80 and compute_90."""
    tmp = tmp_path_factory.mktemp("two-ptx")
    (tmp / "kernel.cu").write_text(SOURCES["kernel.cu"])
    subprocess.run([str(NVCC), "-shared", "-o", "libtwo_ptx.so", "kernel.cu", "-Xcompiler", "-fPIC",
                    "-gencode", "arch=compute_80,code=[sm_80,compute_80]",
                    "-gencode", "arch=compute_90,code=compute_90"],
                   check=True, capture_output=True, cwd=tmp)
    return tmp / "libtwo_ptx.so"


def test_each_ptx_there_says_why_it_is_not_the_one_asked_for(two_ptx: Path) -> None:
    _sass, ptx = _cuda(two_ptx, "8.6+PTX")
    assert not ptx.ok
    assert ptx.detail.startswith(
        f"{two_ptx} lacks PTX compute_86 (asked by 8.6+PTX): compute_80 is older: it JITs on newer GPUs but cannot "
        "use 8.6's instructions, so it is not the 8.6 PTX asked for; compute_90 is newer than 8.6: a 8.6 GPU cannot "
        "JIT it. Requested "), ptx.detail


def test_every_ptx_is_listed(two_ptx: Path) -> None:
    assert _cuda(two_ptx, "8.0+PTX;9.0+PTX")[1].detail == "PTX for compute_80, compute_90"
    assert _cuda(two_ptx, "8.0")[1].detail == "no PTX requested (no +PTX in --cuda-archs); found compute_80, compute_90"
