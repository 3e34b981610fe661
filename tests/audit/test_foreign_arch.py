"""A wheel of another processor, audited on this host (release.yml's index job runs on x86_64 and audits the
wheels of every architecture data/matrix.json has): its libraries are judged against its own platform's policy
(the manylinux system libraries of that processor are the platform's, never "not found") and against the torch
records of its own processor; with none recorded for it, its torch symbols are "not checked", never an ERROR.
`kiln audit --release` and `kiln release` accept a good wheel of every matrix architecture.

Built from small sources with the real compilers: g++ for x86_64 (against the installed torch's real libc10.so),
the Debian cross compiler aarch64-linux-gnu-g++ for aarch64 (scripts/ci/system-deps.sh installs it), against a
small aarch64 libc10.so compiled here and recorded as a torch wheel's would be (`kiln torch-abi`)."""

from __future__ import annotations

import functools
import http.server
import json
import shutil
import subprocess
import threading
import zipfile
from pathlib import Path

import pytest
from audit_corpus import TORCH_LIB

from index.synthetic_wheels import make_wheel
from kiln_tool import torch_abi_records
from kiln_tool.audit import AuditOptions, audit_paths
from kiln_tool.audit import target as target_module
from kiln_tool.audit.torch_abi import DATA_DIR, DATA_DIR_ENV, record_wheel, write_record
from kiln_tool.matrix_data import load_matrix
from trust.kiln_runs import kiln

COMPILERS = {"x86_64": "g++", "aarch64": "aarch64-linux-gnu-g++"}
TORCH = "2.13.0+cpu"

C10 = """
namespace c10 { struct Allocator { int x; }; static Allocator cpu{1};
Allocator* GetCPUAllocator() { return &cpu; }
#ifdef KILN_NEWER_C10
int only_in_a_newer_torch() { return 2; }
#endif
}
"""
EXTENSION = """
#include <string>
#include <vector>
namespace c10 { struct Allocator; Allocator* GetCPUAllocator();
#ifdef KILN_NEWER_C10
int only_in_a_newer_torch();
#endif
}
extern "C" __attribute__((visibility("default"))) void* PyInit__C(void) {
  static std::vector<std::string> names{"kiln"};
  names.push_back(std::to_string(names.size()));
#ifdef KILN_NEWER_C10
  names.push_back(std::to_string(c10::only_in_a_newer_torch()));
#endif
  return c10::GetCPUAllocator();
}
"""


def _compiler(arch: str) -> str:
    compiler = COMPILERS[arch]
    if shutil.which(compiler) is None:
        pytest.skip(f"{compiler} is not installed (scripts/ci/system-deps.sh installs g++-aarch64-linux-gnu)")
    return compiler


def _build(arch: str, out: Path, source: str, *args: str) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    src = out.with_suffix(".cpp")
    src.write_text(source)
    subprocess.run([_compiler(arch), "-shared", "-fPIC", "-O1", "-o", out.name, src.name, *args], check=True,
                   capture_output=True, cwd=out.parent)
    return out


def _extension(arch: str, out: Path, c10_dir: Path, *defines: str) -> bytes:
    (out.parent / "exports.map").parent.mkdir(parents=True, exist_ok=True)
    (out.parent / "exports.map").write_text("{ global: PyInit__C; local: *; };\n")
    _build(arch, out, EXTENSION, *defines, "-fvisibility=hidden", "-fvisibility-inlines-hidden",
           "-Wl,--version-script=exports.map", "-Wl,-z,noexecstack", "-Wl,--enable-new-dtags",
           "-Wl,-rpath,$ORIGIN/../torch/lib", f"-L{c10_dir}", "-lc10")
    return out.read_bytes()


def _torch_record(tmp: Path, arch: str, c10: Path, records: Path) -> Path:
    """`kiln torch-abi` of a torch wheel for `arch` whose torch/lib/libc10.so is the small one built here."""
    tag = f"cp311-cp311-manylinux_2_28_{arch}"
    wheel = tmp / f"torch-{TORCH.split('+')[0]}-{tag}.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("torch/version.py", f"__version__ = '{TORCH}'\n")
        zf.writestr(f"torch-{TORCH}.dist-info/WHEEL", f"Wheel-Version: 1.0\nTag: {tag}\n")
        zf.writestr("torch/lib/libc10.so", c10.read_bytes())
    return write_record(record_wheel(wheel), records)


def _wheel(dist: Path, arch: str, extension: bytes) -> Path:
    return make_wheel(dist, platform=f"manylinux_2_28_{arch}", build_info_overrides={"torch_version": TORCH},
                      extra_files={f"opkiln/_C.cpython-311-{arch}-linux-gnu.so": extension})


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Per matrix architecture, a good extension (x86_64: linked against the installed torch's libc10.so;
    aarch64: against a small aarch64 libc10.so, recorded as torch 2.13.0+cpu for aarch64 in `records`, beside a
    copy of the repository's x86_64 record of that torch); and an aarch64 extension that uses a c10 function the
    recorded aarch64 torch lacks."""
    tmp = tmp_path_factory.mktemp("foreign-arch")
    records = tmp / "records"
    records.mkdir()
    shutil.copy2(DATA_DIR / f"{TORCH}.json", records / f"{TORCH}.json")
    out: dict[str, Path] = {"records": records}
    assert set(load_matrix()["platforms"]) == {"x86_64", "aarch64"}, "a new matrix architecture: build its case here"
    if not (TORCH_LIB / "libc10.so").is_file():
        pytest.skip(f"no installed torch at {TORCH_LIB}")
    out["x86_64"] = tmp / "x86_64" / "_C.so"
    out["x86_64"].parent.mkdir()
    out["x86_64"].write_bytes(_extension("x86_64", tmp / "x86_64" / "_C.so", TORCH_LIB))
    c10 = _build("aarch64", tmp / "aarch64" / "libc10.so", C10)
    out["aarch64-record"] = _torch_record(tmp, "aarch64", c10, records)
    _extension("aarch64", tmp / "aarch64" / "_C.so", c10.parent)
    out["aarch64"] = tmp / "aarch64" / "_C.so"
    newer = _build("aarch64", tmp / "newer" / "libc10.so", C10, "-DKILN_NEWER_C10")
    _extension("aarch64", tmp / "newer" / "_C.so", newer.parent, "-DKILN_NEWER_C10")
    out["aarch64-newer"] = tmp / "newer" / "_C.so"
    return out


@pytest.fixture
def only_records(built: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(DATA_DIR_ENV, str(built["records"]))
    return built["records"]


def _text(run: object) -> str:
    return " ".join((run.stdout + run.stderr).split())  # type: ignore[attr-defined]


def test_release_audit_and_release_accept_good_wheels_of_every_matrix_architecture(
        built: dict[str, Path], only_records: Path, tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    wheels = {arch: _wheel(dist, arch, built[arch].read_bytes()) for arch in load_matrix()["platforms"]}
    audited = kiln("audit", "--release", "--verbose", *wheels.values())
    text = _text(audited)
    assert audited.code == 0, audited.stdout + audited.stderr
    assert f"torch: {TORCH} as recorded in records/{TORCH}-aarch64.json" in text
    # The aarch64 platform's own libraries: the platform's, never "not found"; said to be unread here.
    assert "libc.so.6 (the aarch64 platform's system library (manylinux_2_28 lists it); this x86_64 host has " \
        "no aarch64 copy, so its exports are not checked here)" in text
    assert "not found" not in text
    # The aarch64 extension's c10 symbol was resolved against the aarch64 record, not x86_64 torch's.
    assert "1 from libc10.so" in text.split(str(wheels["aarch64"]))[1]
    storage = tmp_path / "storage.json"
    storage.write_text(json.dumps({"backend": "site"}))
    nothing = tmp_path / "nothing-published"
    nothing.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(nothing))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        released = kiln("release", dist, tmp_path / "site", "--base-url", f"http://127.0.0.1:{server.server_port}/",
                        "--first-release", "--storage", storage)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    assert released.code == 0, released.stdout + released.stderr
    assert "every target torch is recorded or installed" in released.stdout
    listed = {w["filename"] for w in json.loads((tmp_path / "site" / "kiln-index.json").read_text())["wheels"]}
    assert listed == {w.name for w in wheels.values()}


def test_an_aarch64_symbol_its_recorded_torch_lacks_is_an_error(built: dict[str, Path], only_records: Path,
                                                                tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, "aarch64", built["aarch64-newer"].read_bytes())
    report = audit_paths([wheel])
    (artifact,) = report.artifacts
    failures = [(c.id, c.severity, c.detail) for _, c in artifact.rows() if not c.ok]
    assert [(i, s) for i, s, _ in failures] == [("undefined-symbols", "error")], failures
    assert "_ZN3c1021only_in_a_newer_torchEv" in failures[0][2]


def test_without_a_record_for_its_processor_the_torch_symbols_are_not_checked_never_an_error(
        built: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    records = tmp_path / "x86-only"
    records.mkdir()
    shutil.copy2(built["records"] / f"{TORCH}.json", records)
    monkeypatch.setenv(DATA_DIR_ENV, str(records))
    wheel = _wheel(tmp_path / "dist", "aarch64", built["aarch64"].read_bytes())
    report = audit_paths([wheel], AuditOptions(release=None))
    (artifact,) = report.artifacts
    assert report.ok
    assert "not found: torch 2.13.0+cpu (build info torch_version) is neither installed here (none for aarch64)" \
        in str(artifact.target["torch"])
    findings = {(c.id, c.finding): " ".join(c.detail.split()) for _, c in artifact.rows() if not c.ok}
    assert set(findings) == {("undefined-symbols", "arch-unrecorded"), ("wheel-tag", "floor-unknown")}
    assert "Its torch symbols were not checked" in findings[("undefined-symbols", "arch-unrecorded")]
    assert all(c.severity == "warning" for _, c in artifact.rows() if not c.ok)
    # The x86_64 torch installed here (and its record) is never the target of an aarch64 wheel, even when asked for.
    asked = audit_paths([wheel], AuditOptions(torch_version=TORCH)).artifacts[0]
    assert "none for aarch64" in str(asked.target["torch"])
    # What the release records first: that torch for aarch64, downloaded for that platform.
    monkeypatch.setattr(target_module, "candidate_lib_dirs", lambda: [TORCH_LIB])
    assert torch_abi_records.needed_torches([wheel]) == [f"{TORCH}-aarch64"]
    x86 = _wheel(tmp_path / "x86", "x86_64", built["x86_64"].read_bytes())
    assert torch_abi_records.needed_torches([x86]) == []


def test_a_record_file_is_named_for_its_processor(built: dict[str, Path], only_records: Path) -> None:
    from kiln_tool.audit.torch_abi import load_recorded, recorded_versions

    assert built["aarch64-record"].name == f"{TORCH}-aarch64.json"
    assert set(recorded_versions("aarch64")) == {TORCH} == set(recorded_versions())
    aarch64, x86_64 = load_recorded(TORCH, "aarch64"), load_recorded(TORCH)
    assert aarch64 is not None and x86_64 is not None
    assert aarch64.platform_tags == ("manylinux_2_28_aarch64",) and x86_64.data_file.name == f"{TORCH}.json"


ZLIB_STUB = 'extern "C" int kiln_zprivate() { return 1; }\n'
USES_ZLIB_STUB = ('extern "C" int kiln_zprivate();\n'
                  'extern "C" __attribute__((visibility("default"))) int PyInit__C() { return kiln_zprivate(); }\n')


def test_an_aarch64_symbol_of_a_platform_library_in_no_namespace_the_policy_bounds_is_not_the_platforms(
        only_records: Path, tmp_path: Path) -> None:
    # libz.so.1 is a platform library of the manylinux policy, but `zprivate` is no NAMESPACE_version the
    # policy bounds (GLIBC_2.17, ZLIB_1.2.9, ...): the platform is not assumed to provide it.
    stub = tmp_path / "zlib" / "libz.so.1"
    stub.parent.mkdir()
    (stub.parent / "z.map").write_text("zprivate { global: kiln_zprivate; local: *; };\n")
    _build("aarch64", stub, ZLIB_STUB, "-Wl,--version-script=z.map", "-Wl,-soname,libz.so.1")
    extension = _build("aarch64", tmp_path / "ext" / "_C.so", USES_ZLIB_STUB, "-fvisibility=hidden", str(stub))
    report = audit_paths([_wheel(tmp_path / "dist", "aarch64", extension.read_bytes())])
    (artifact,) = report.artifacts
    (result,) = [c for _, c in artifact.rows() if c.id == "undefined-symbols" and not c.ok]
    assert (result.ok, result.finding, result.severity) == (False, "unchecked", "warning"), result
    assert "kiln_zprivate@zprivate (from libz.so.1)" in result.detail
    assert "run the audit on aarch64 itself" in result.fix


def test_an_aarch64_wheel_without_a_record_counts_the_cuda_runtime_as_its_torchs_not_as_missing(
        built: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # With no torch for aarch64 installed or recorded, libcudart.so.13 (what a CUDA torch brings from its nvidia-*
    # wheels) is that torch's, unknown: named in the arch-unrecorded warning. A library no torch brings stays missing.
    records = tmp_path / "x86-only"
    records.mkdir()
    shutil.copy2(built["records"] / f"{TORCH}.json", records)
    monkeypatch.setenv(DATA_DIR_ENV, str(records))
    libs = tmp_path / "libs"
    for soname in ("libcudart.so.13", "libkiln_elsewhere.so.1"):
        _build("aarch64", libs / soname, f'extern "C" int {soname.split(".")[0]}_f() {{ return 1; }}\n',
               f"-Wl,-soname,{soname}")
    uses = ('extern "C" int libcudart_f(); extern "C" int libkiln_elsewhere_f();\n'
            'extern "C" __attribute__((visibility("default"))) int PyInit__C() '
            '{ return libcudart_f() + libkiln_elsewhere_f(); }\n')
    c10 = built["aarch64"].parent
    ext = _build("aarch64", tmp_path / "ext" / "_C.so", uses, "-fvisibility=hidden", str(libs / "libcudart.so.13"),
                 str(libs / "libkiln_elsewhere.so.1"), f"-L{c10}", "-Wl,--no-as-needed", "-lc10")
    report = audit_paths([_wheel(tmp_path / "dist", "aarch64", ext.read_bytes())], AuditOptions(release=None))
    (artifact,) = report.artifacts
    found = {(c.id, c.finding): c for _, c in artifact.rows() if not c.ok}
    unrecorded = found[("undefined-symbols", "arch-unrecorded")]
    assert unrecorded.severity == "warning"
    assert "needs libcudart.so.13, libc10.so of a torch for aarch64" in " ".join(unrecorded.detail.split())
    assert "libkiln_elsewhere" not in unrecorded.detail
    assert unrecorded.detail.endswith(" Its torch symbols were not checked (not failed: a torch of another "
                                      "processor is never a target).")
    assert "scripts/kiln torch-abi --for-wheels WHEEL" in unrecorded.fix
    missing = found[("undefined-symbols", "")]
    assert missing.severity == "error"
    assert "needed libraries not found in the installed layout: libkiln_elsewhere.so.1." in missing.detail
