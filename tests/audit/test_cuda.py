"""The fatbin parser against cuobjdump, and the cuda-sass / cuda-ptx checks on libraries built by nvcc."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from audit_corpus import Corpus, run_kiln

from kiln_tool.audit import AuditInputError, AuditOptions, audit_paths
from kiln_tool.audit.archs import CudaArch, parse_arch_list
from kiln_tool.audit.elf import ElfLibrary
from kiln_tool.audit.fatbin import FatbinError, iter_entries, manifest


def _cuobjdump() -> str | None:
    found = shutil.which("cuobjdump")
    if found:
        return found
    candidates = sorted(Path(sys.prefix).glob("lib/python*/site-packages/nvidia/*/bin/cuobjdump"))
    return str(candidates[0]) if candidates else None


def fatbin_of(path: Path) -> bytes:
    data = ElfLibrary.open(path).section_data(".nv_fatbin")
    assert data is not None
    return data


def test_arch_list_syntax() -> None:
    request = parse_arch_list("8.0;9.0a 10.0f,12.0+PTX", "test")
    assert [str(a) for a in request.sass] == ["8.0", "9.0a", "10.0f", "12.0"]
    assert [a.compute for a in request.ptx] == ["compute_120"]
    # TORCH_CUDA_ARCH_LIST: PTX only where +PTX is written, not for the newest arch by default.
    assert parse_arch_list(["8.0+PTX", "9.0"], "t").ptx == (CudaArch(8, 0),)
    with pytest.raises(AuditInputError, match="'sm_80' is not a CUDA arch"):
        parse_arch_list("sm_80", "test")
    with pytest.raises(AuditInputError, match="empty"):
        parse_arch_list(" ; ", "test")


@pytest.mark.parametrize("name", ["libcuda_80_90a.so", "libcuda_mixed.so", "libcuda_lineinfo.so"])
def test_parser_agrees_with_cuobjdump(corpus: Corpus, name: str) -> None:
    tool = _cuobjdump()
    if tool is None:
        pytest.skip("no cuobjdump (pip install nvidia-cuda-cuobjdump)")
    lib = corpus[name]
    listing = subprocess.run([tool, "--list-elf", "--list-ptx", str(lib)], capture_output=True, text=True,
                             check=True).stdout
    theirs_sass = sorted(re.findall(r"^ELF file\s+\d+: .*\.(sm_\d+[af]?)\.cubin$", listing, re.MULTILINE))
    theirs_ptx = sorted(re.findall(r"^PTX file\s+\d+: .*\.(sm_\d+[af]?)\.ptx$", listing, re.MULTILINE))
    entries = list(iter_entries(fatbin_of(lib)))
    # cuobjdump names family ("f") cubins without their suffix; PTX keeps it.
    ours_sass = sorted(re.sub(r"f$", "", e.arch.sm) for e in entries if e.kind == "sass")
    ours_ptx = sorted(e.arch.sm for e in entries if e.kind == "ptx")
    assert ours_sass == theirs_sass
    assert ours_ptx == theirs_ptx
    assert entries, "the corpus library carries device code"


def test_variants_are_reported(corpus: Corpus) -> None:
    found = manifest(list(iter_entries(fatbin_of(corpus["libcuda_80_90a.so"]))))
    assert found.to_json() == {"sass": ["sm_80", "sm_90a"], "ptx": ["compute_90a"]}
    mixed = manifest(list(iter_entries(fatbin_of(corpus["libcuda_mixed.so"]))))
    assert mixed.to_json() == {"sass": ["sm_80", "sm_100f"], "ptx": ["compute_120"]}


def test_malformed_fatbin() -> None:
    with pytest.raises(FatbinError, match="bad container magic"):
        list(iter_entries(b"\x01\x02\x03\x04" + bytes(12)))
    good_header = (0xBA55ED50).to_bytes(4, "little") + (1).to_bytes(2, "little") + (16).to_bytes(2, "little")
    with pytest.raises(FatbinError, match="claims"):
        list(iter_entries(good_header + (4096).to_bytes(8, "little") + bytes(64)))


def test_cuda_checks(corpus: Corpus) -> None:
    lib = corpus["libcuda_80_90a.so"]
    ok = audit_paths([lib], AuditOptions(cuda_archs="8.0;9.0a"))
    checks = {c.id: c for c in ok.artifacts[0].libraries[0].checks if not c.finding}
    assert checks["cuda-sass"].ok and checks["cuda-ptx"].ok
    assert ok.artifacts[0].libraries[0].cuda_manifest == {"sass": ["sm_80", "sm_90a"], "ptx": ["compute_90a"]}

    missing = audit_paths([lib], AuditOptions(cuda_archs="8.0;9.0;12.0+PTX"))
    checks = {c.id: c for c in missing.artifacts[0].libraries[0].checks if not c.finding}
    assert not checks["cuda-sass"].ok
    assert "lacks SASS for sm_90, sm_120" in checks["cuda-sass"].detail
    assert "found SASS sm_80, sm_90a; PTX compute_90a" in checks["cuda-sass"].detail
    assert not checks["cuda-ptx"].ok and "compute_120" in checks["cuda-ptx"].detail
    assert "compute_90a is arch-specific: it JITs only on 9.0, never forward" in checks["cuda-ptx"].detail


def test_cuda_archs_on_the_command_line(corpus: Corpus) -> None:
    result = run_kiln("audit", "--cuda-archs", "8.0;10.0f;12.0+PTX", str(corpus["libcuda_mixed.so"]))
    assert result.returncode == 1
    text = " ".join(result.stdout.split())  # long lines are wrapped
    assert "CUDA arch manifest" in text and "SASS sm_80, sm_100f; PTX compute_120" in text
    # sm_100f is there; 12.0 has PTX only, so SASS for sm_120 is what is missing.
    assert "lacks SASS for sm_120:" in " ".join(result.stdout.split())
    assert "ERROR cuda-ptx" not in result.stdout


def test_lineinfo_paths_inside_compressed_ptx(corpus: Corpus) -> None:
    lib = corpus["libcuda_lineinfo.so"]
    checks = {c.id: c for c in audit_paths([lib]).artifacts[0].libraries[0].checks if not c.finding}
    assert not checks["build-paths"].ok
    assert ".nv_fatbin compute_90" in checks["build-paths"].detail


def test_gpu_says_whether_each_library_runs(corpus: Corpus) -> None:
    lib = str(corpus["libcuda_80_90a.so"])  # SASS sm_80, sm_90a; PTX compute_90a
    for gpu, verdict, reason in (
            ("sm_86", "runs", "SASS sm_80 (binary compatible: same major 8, 8.0 <= 8.6)"),
            ("sm_90", "runs", "SASS sm_90a"),
            ("sm_100", "CANNOT run", "sm_90a is arch-specific to 9.0"),
            ("sm_75", "CANNOT run", "sm_80 is newer")):
        result = run_kiln("audit", "--gpu", gpu, lib)
        text = " ".join(result.stdout.split())
        assert f"{gpu}: {lib} {verdict}: " in text and reason in text, text
    document = json.loads(run_kiln("audit", "--json", "--gpu", "sm_100", lib).stdout)
    assert document["artifacts"][0]["libraries"][0]["gpu"]["runs"] is False
    bad = run_kiln("audit", "--gpu", "ampere", lib)
    assert bad.returncode == 2 and "--gpu 'ampere'" in bad.stderr
