"""How findings read: copies of one library (x.so, x.so.0, x.so.0.6.0) audited and reported once, tags as the
file name writes them, list items kept apart, counts that say what they count, and an exact-match cubin
explained as such."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from audit_corpus import Corpus, make_wheel
from hypothesis import given
from hypothesis import strategies as st

from kiln_tool.audit import audit_paths
from kiln_tool.audit.archs import CudaArch, gpu_runs
from kiln_tool.audit.fatbin import ArchManifest


def test_copies_of_one_library_are_one_finding(corpus: Corpus, tmp_path: Path) -> None:
    leaky = corpus["libcombo.so"].read_bytes()  # exports, text relocation, exec stack, absolute RPATH
    other = corpus["libtextrel.so"].read_bytes()
    wheel = make_wheel(tmp_path, {"kilntest/lib/libx.so": leaky, "kilntest/lib/libx.so.0": leaky,
                                  "kilntest/lib/libx.so.0.6.0": leaky,
                                  # same name stem, different bytes: a different library
                                  "kilntest/lib/libx.so.1": other,
                                  # same bytes, another folder: shipped twice, audited twice
                                  "kilntest/other/libx.so": leaky})
    report = audit_paths([wheel])
    (artifact,) = report.artifacts
    paths = sorted(lib.path for lib in artifact.libraries)
    assert paths == ["kilntest/lib/libx.so.0.6.0", "kilntest/lib/libx.so.1", "kilntest/other/libx.so"]
    (main,) = [lib for lib in artifact.libraries if lib.path == "kilntest/lib/libx.so.0.6.0"]
    assert main.copies == ["kilntest/lib/libx.so", "kilntest/lib/libx.so.0"]
    text = report.render_text()
    assert "kilntest/lib/libx.so.0.6.0 (also as kilntest/lib/libx.so, kilntest/lib/libx.so.0: identical bytes)" in text
    assert text.count("ERROR rpath") == 2  # libx.so.0.6.0 and other/libx.so; never per copy
    assert json.loads(json.dumps(report.to_json()))["artifacts"][0]["libraries"][0]["copies"] is not None


def test_tags_as_written(corpus: Corpus, tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, {"kilntest/libplain.so": corpus["libplain.so"].read_bytes()},
                       tag="cp311-cp311-manylinux2014_x86_64")
    (artifact,) = audit_paths([wheel]).artifacts
    assert "the wheel's tag manylinux2014_x86_64 (= manylinux_2_17_x86_64)" in artifact.target["policy"]


@given(st.sampled_from([(7, 5), (8, 0), (8, 6), (9, 0), (10, 0), (12, 0)]), st.sampled_from(["", "a", "f"]))
def test_an_exact_cubin_is_for_it(arch: tuple[int, int], variant: str) -> None:
    cubin = CudaArch(arch[0], arch[1], variant)
    runs, how = gpu_runs(ArchManifest(sass=(cubin,), ptx=()), CudaArch(arch[0], arch[1]))
    assert runs and how.startswith(f"SASS {cubin.sm} (for it") and "same major" not in how
    newer = CudaArch(arch[0], arch[1] + 1)
    if variant != "a":
        runs, how = gpu_runs(ArchManifest(sass=(cubin,), ptx=()), newer)
        assert runs and "binary compatible: same major" in how


def test_registration_counts_say_what_they_count(corpus: Corpus) -> None:
    report = audit_paths([corpus["libregister.so"]])
    (check,) = [c for c in report.artifacts[0].libraries[0].checks if c.id == "registration"]
    assert "1 registration API symbol(s) referenced: _ZN5torch6detail16TorchLibraryInitC1E" in check.detail
    assert "call(s)" not in check.detail


def test_list_items_stay_apart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two CUDA majors are two items: 'libcudart.so.12, libcudart.so.13', never 'libcudart.so.12,13'."""
    import shutil
    import subprocess

    from kiln_tool.audit import target as target_module
    from kiln_tool.audit.torch_abi import load_recorded

    if shutil.which("gcc") is None or load_recorded("2.14.1+cu130") is None:
        pytest.skip("needs gcc and the recorded torch 2.14.1+cu130")
    monkeypatch.setattr(target_module, "candidate_lib_dirs", lambda: [])
    files = {}
    for major, name in ((12, "liba.so"), (13, "libb.so")):
        work = tmp_path / str(major)
        work.mkdir()
        (work / "s.c").write_text("int cudaGetDeviceCount(int *c) { *c = 0; return 0; }\n")
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", f"libcudart.so.{major}", "s.c",
                        f"-Wl,-soname,libcudart.so.{major}"], check=True, cwd=work)
        (work / "u.c").write_text("extern int cudaGetDeviceCount(int *); int kiln_n(void) { int n; "
                                  "return cudaGetDeviceCount(&n); }\n")
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", name, "u.c", f"-L{work}", f"-l:libcudart.so.{major}"],
                       check=True, cwd=work)
        files[f"kilntest/{name}"] = (work / name).read_bytes()
    wheel = make_wheel(tmp_path, files, requires=("torch==2.14.1",))
    (artifact,) = audit_paths([wheel]).artifacts
    (tag,) = [c for c in artifact.checks if c.id == "wheel-tag" and not c.ok and not c.finding]
    assert "the binaries need libcudart.so.12, libcudart.so.13 but torch 2.14.1+cu130 ships CUDA 13" in tag.detail
