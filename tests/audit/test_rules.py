"""Rules of the audit tested on generated input: build-path shapes, registration init symbols,
the severity table and the recorded torch ABI's lookups."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kiln_tool.audit.checks.build_paths import find_build_paths
from kiln_tool.audit.checks.registration import parse_init_symbol
from kiln_tool.audit.errors import AuditInputError
from kiln_tool.audit.policy import load_policy
from kiln_tool.audit.torch_abi import HASH_BYTES, RecordedLibrary, load_recorded, recorded_versions, symbol_hash

RULE = load_policy("manylinux_2_28").build_paths

component = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=10)
roots = st.sampled_from(["/pytorch", "/src", "/opt/build", "/__w/audio", "/srv/ci", "/home/u", "/io", "/data/x"])
source_ext = st.sampled_from(["c", "cpp", "cu", "cuh", "h", "hpp", "py", "o", "inl"])


@given(roots, st.lists(component, min_size=1, max_size=4), component, source_ext)
def test_a_source_file_path_is_a_build_path_under_any_root(root: str, dirs: list[str], stem: str, ext: str) -> None:
    path = "/".join([root, *dirs, f"{stem}.{ext}"])
    assert RULE.classify(path) in ("source", "toolchain")
    blob = b"\x00prefix\x00" + path.encode() + b"\x00tail"
    assert [(p, k) for _, p, k in find_build_paths(blob, RULE)] == [(path, RULE.classify(path))]


@given(st.lists(component, min_size=1, max_size=3), source_ext)
def test_project_sources_outside_include_dirs_are_errors(dirs: list[str], ext: str) -> None:
    dirs = [d for d in dirs if d != "include"] or ["lib"]
    assert RULE.classify("/" + "/".join(["buildroot", *dirs, f"kernel.{ext}"])) == "source"


@given(st.sampled_from(["/proc/self/maps", "/dev/null", "/dev/shm", "/etc/ld.so.conf", "/tmp/kiln_runtime.log",
                        "/tmp/perf-", "/usr/lib/x86_64-linux-gnu", "/sys/devices/system/cpu/online",
                        "/usr/share/zoneinfo", "/bin/sh", "/proc/cpuinfo", "/var/run/nscd/socket",
                        "/usr/local/cuda/lib64/libcudart.so", "/dev/nvidia-uvm"]))
def test_run_time_paths_are_not_build_paths(path: str) -> None:
    assert RULE.classify(path) is None or RULE.classify(path) == "toolchain"
    assert RULE.classify(path) != "source"


def test_examples() -> None:
    assert RULE.classify("/__w/audio/audio/pytorch/audio/src/libtorchaudio/forced_align/compute.cpp") == "source"
    assert RULE.classify("/pytorch/vision/build/temp.linux-x86_64/objects") == "source"
    assert RULE.classify("/home/builder/lib") == "source"
    assert RULE.classify("/tmp/pip-req-build-x1y2/ops/kernel.cpp") == "source"
    assert RULE.classify("/opt/rh/gcc-toolset-13/root/usr/include/c++/13/bits/basic_string.h") == "toolchain"
    conda = "/__w/_temp/conda_env/lib/python3.11/site-packages/torch/include/torch/csrc/stable/library.h"
    assert RULE.classify(conda) == "toolchain"
    assert RULE.classify("/usr/include/stdio.h") == "toolchain"
    for innocent in ("/proc/self/maps", "/dev/null", "/tmp/kiln_runtime.log", "/etc/passwd"):
        assert RULE.classify(innocent) is None
    # A path inside another path, or a relative one, is not absolute.
    assert find_build_paths(b"\x00opkiln/src/kernel.cpp\x00", RULE) == []
    # Machine code is not searched: only the caller (check_build_paths) skips .text; the finder sees bytes.
    assert find_build_paths(b"\x00/a\x00", RULE) == []


def _static(identifier: str, params: str) -> str:
    return f"_ZL{len(identifier)}{identifier}{params}"


@pytest.mark.parametrize(("symbol", "expected"), [
    (_static("TORCH_LIBRARY_init_opkiln", "RN5torch7LibraryE"), ("TORCH_LIBRARY", "opkiln")),
    (_static("TORCH_LIBRARY_init_my_ns_with_u", "RN5torch7LibraryE"), ("TORCH_LIBRARY", "my_ns_with_u")),
    (_static("STABLE_TORCH_LIBRARY_init_torchaudio", "P19StableLibraryOpaque"), ("STABLE_TORCH_LIBRARY", "torchaudio")),
    (_static("TORCH_LIBRARY_FRAGMENT_init_my_ns_12", "RN5torch7LibraryE"), ("TORCH_LIBRARY_FRAGMENT", "my_ns")),
    (_static("STABLE_TORCH_LIBRARY_FRAGMENT_init_audio_3", "Pv"), ("STABLE_TORCH_LIBRARY_FRAGMENT", "audio")),
    (_static("TORCH_LIBRARY_IMPL_init_opkiln_CPU_1", "RN5torch7LibraryE"), None),
    ("TORCH_LIBRARY_init_cns", ("TORCH_LIBRARY", "cns")),
    (_static("TORCH_LIBRARY_init_opkiln", "RN5torch7LibraryE") + ".cold", ("TORCH_LIBRARY", "opkiln")),
    ("_ZL99TORCH_LIBRARY_init_x", None),
    # Seen in torchaudio 2.11.1 and torchvision 0.29.1 (readelf -sW):
    ("_ZL44STABLE_TORCH_LIBRARY_static_init__torchaudio", ("STABLE_TORCH_LIBRARY", "_torchaudio")),
    ("_ZL47STABLE_TORCH_LIBRARY_FRAGMENT_init_torchaudio_0RN5torch6stable6detail13StableLibraryE",
     ("STABLE_TORCH_LIBRARY_FRAGMENT", "torchaudio")),
    ("_ZN6vision3opsL55STABLE_TORCH_LIBRARY_FRAGMENT_static_init_torchvision_0E",
     ("STABLE_TORCH_LIBRARY_FRAGMENT", "torchvision")),
    ("_ZN6vision3opsL49STABLE_TORCH_LIBRARY_IMPL_init_torchvision_CUDA_0ERN5torch6stable6detail13StableLibraryE",
     None),
    ("_ZL46STABLE_TORCH_LIBRARY_init_torchaudio_prefixctcRN5torch6stable6detail13StableLibraryE",
     ("STABLE_TORCH_LIBRARY", "torchaudio_prefixctc")),
])
def test_init_symbols_are_demangled_by_length(symbol: str, expected: tuple[str, str] | None) -> None:
    assert parse_init_symbol(symbol) == expected


@given(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True), st.booleans(), st.integers(0, 999),
       st.sampled_from(["RN5torch7LibraryE", "P19StableLibraryOpaque", "Pv", ""]))
def test_init_symbol_namespace_round_trip(namespace: str, fragment: bool, uid: int, params: str) -> None:
    for stable in ("", "STABLE_"):
        macro = f"{stable}TORCH_LIBRARY{'_FRAGMENT' if fragment else ''}"
        identifier = f"{macro}_init_{namespace}" + (f"_{uid}" if fragment else "")
        assert parse_init_symbol(f"_ZL{len(identifier)}{identifier}{params}") == (macro, namespace)


def test_severity_comes_from_the_policy_data() -> None:
    policy = load_policy("manylinux_2_28")
    assert policy.severity_of("undefined-symbols", "preload") == "warning"
    assert policy.severity_of("undefined-symbols", "") == "error"
    assert policy.severity_of("rpath", "") == "error"
    assert policy.severity_of("build-paths", "toolchain") == "warning"
    assert policy.severity_of("build-paths", "") == "error"


def test_a_severity_table_naming_no_check_is_rejected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kiln_tool.audit import policy as policy_module

    source = policy_module.POLICY_DIR
    for path in source.glob("*.json"):
        (tmp_path / path.name).write_text(path.read_text())
    common = json.loads((tmp_path / "common.json").read_text())
    common["severity"]["no-such-check"] = "warning"
    (tmp_path / "common.json").write_text(json.dumps(common))
    monkeypatch.setattr(policy_module, "POLICY_DIR", tmp_path)
    monkeypatch.setattr(policy_module, "_CACHE", {})
    with pytest.raises(AuditInputError, match="no-such-check"):
        policy_module.load_policy("manylinux_2_28")


@given(st.sets(st.text(min_size=1, max_size=30), min_size=1, max_size=200), st.text(min_size=1, max_size=30))
def test_recorded_lookup_finds_every_recorded_symbol(names: set[str], other: str) -> None:
    blob = b"".join(sorted({symbol_hash(n) for n in names}))
    lib = RecordedLibrary("torch/lib/libx.so", "libx.so", (), (), blob)
    assert all(lib.exports(n, None) for n in names)
    if symbol_hash(other) not in {symbol_hash(n) for n in names}:
        assert not lib.exports(other, None)
    assert len(blob) % HASH_BYTES == 0


def test_committed_records_cover_the_installed_torch() -> None:
    assert "2.13.0+cpu" in recorded_versions()
    record = load_recorded("2.13.0+cpu")
    assert record is not None and record.cxx11_abi is True
    c10 = record.libraries["torch/lib/libc10.so"]
    assert c10.exports("_ZN3c1019UndefinedTensorImpl10_singletonE", None)
    assert not c10.exports("_ZN3c10_no_such_symbol_anywhere", None)
    assert "manylinux_2_28_x86_64" in record.platform_tags
