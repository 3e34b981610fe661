"""undefined-symbols: each symbol resolved to the library that provides it. A library whose exports are
unknown (not recorded, the GPU driver) vouches for nothing; what it alone could provide is reported as
not checked, torch's own symbols are still checked against torch; symbols from a library that only
`import torch` loads are underlinked. Fixtures are built from tiny sources with the real compilers."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from audit_corpus import HARDENED, fake_torch_wheel, installed_project, installed_torch, make_wheel, run_kiln

from kiln_tool.audit import CheckResult, audit_paths
from kiln_tool.audit import target as target_module
from kiln_tool.audit.torch_abi import DATA_DIR_ENV, RUNTIME_DIR

SOURCES = {
    # A CUDA-math-like runtime library (what nvidia-* wheels ship), and the GPU driver.
    "kilnblas.c": '__attribute__((visibility("default"))) int kilnblas_gemm(int n) { return n; }\n',
    "cuda_driver.c": '__attribute__((visibility("default"))) int cuInit(unsigned flags) { return (int)flags; }\n',
    # torch's libc10.so: exports c10::kiln_present, and loads the runtime library.
    "c10.cpp": """
extern "C" int kilnblas_gemm(int);
namespace c10 { __attribute__((visibility("default"))) int kiln_present() { return kilnblas_gemm(1); } }
""",
    "dep.c": '__attribute__((visibility("default"))) int kiln_dep(int x) { return x; }\n',
    # The extension: uses torch (one symbol this torch lacks), the runtime library and the driver.
    "ext.cpp": """
extern "C" int kilnblas_gemm(int);
extern "C" int cuInit(unsigned);
namespace c10 { int kiln_present(); int kiln_absent(); }
extern "C" __attribute__((visibility("default"))) int kiln_ext() {
  return c10::kiln_present() + c10::kiln_absent() + kilnblas_gemm(2) + cuInit(0);
}
""",
    # Uses kiln_dep, which only a library `import torch` loads provides, without naming it in NEEDED.
    "under.cpp": """
extern "C" int kiln_dep(int);
namespace c10 { int kiln_present(); }
extern "C" __attribute__((visibility("default"))) int kiln_under() { return c10::kiln_present() + kiln_dep(1); }
""",
}


def _build(src: Path, out: Path, source: str, *flags: str) -> bytes:
    compiler = "g++" if source.endswith(".cpp") else "gcc"
    subprocess.run([compiler, "-shared", "-o", str(out), source, *HARDENED, *flags], check=True,
                   capture_output=True, cwd=src)
    return out.read_bytes()


@pytest.fixture(scope="module")
def libs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    if shutil.which("gcc") is None or shutil.which("g++") is None:
        pytest.skip("gcc/g++ are needed")
    root = tmp_path_factory.mktemp("resolution")
    for name, text in SOURCES.items():
        (root / name).write_text(text)
    built = {
        "libkilnblas.so.1": _build(root, root / "libkilnblas.so.1", "kilnblas.c", "-Wl,-soname,libkilnblas.so.1"),
        "libcuda.so.1": _build(root, root / "libcuda.so.1", "cuda_driver.c", "-Wl,-soname,libcuda.so.1"),
        "libdep.so": _build(root, root / "libdep.so", "dep.c"),
    }
    built["libc10.so"] = _build(root, root / "libc10.so", "c10.cpp", f"-L{root}", "-l:libkilnblas.so.1")
    built["ext.so"] = _build(root, root / "ext.so", "ext.cpp", f"-L{root}", "-lc10", "-l:libkilnblas.so.1",
                             "-l:libcuda.so.1", "-Wl,--allow-shlib-undefined", "-Wl,--unresolved-symbols=ignore-all")
    built["under.so"] = _build(root, root / "under.so", "under.cpp", f"-L{root}", "-lc10",
                               "-Wl,--unresolved-symbols=ignore-all")
    return built


def _site_packages(root: Path, version: str, libs: dict[str, bytes]) -> Path:
    """torch installed with its runtime wheel, as pip lays them out: dist-info METADATA and RECORD."""
    site = root / "lib" / "python3.11" / "site-packages"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "version.py").write_text(f"__version__ = '{version}'\n")
    torch_info = site / f"torch-{version.split('+')[0]}.dist-info"
    torch_info.mkdir()
    (torch_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {version.split('+')[0]}\n"
                                         "Requires-Dist: sympy\n"
                                         "Requires-Dist: nvidia-kilnblas==1.0; platform_system == \"Linux\"\n"
                                         "Requires-Dist: nvidia-kilnwin==1.0; platform_system == \"Windows\"\n")
    (torch_info / "RECORD").write_text("torch/version.py,,\n")
    lib_dir = site / "nvidia" / "kilnblas" / "lib"
    lib_dir.mkdir(parents=True)
    (lib_dir / "libkilnblas.so.1").write_bytes(libs["libkilnblas.so.1"])
    blas_info = site / "nvidia_kilnblas-1.0.dist-info"
    blas_info.mkdir()
    (blas_info / "METADATA").write_text("Metadata-Version: 2.1\nName: nvidia-kilnblas\nVersion: 1.0\n")
    (blas_info / "RECORD").write_text("nvidia/kilnblas/lib/libkilnblas.so.1,,\n")
    return site


def _undefined(report_lib: object) -> list[CheckResult]:
    return [c for c in report_lib.checks if c.id == "undefined-symbols"]  # type: ignore[attr-defined]


def test_unknown_stays_unknown(libs: dict[str, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    records = tmp_path / "records"
    torch = fake_torch_wheel(tmp_path / "torch", "9.1.0+cu1", {"libc10.so": libs["libc10.so"],
                                                           "libdep.so": libs["libdep.so"]})
    made = run_kiln("torch-abi", str(torch), "--out", str(records))
    assert made.returncode == 0, made.stderr
    monkeypatch.setenv(DATA_DIR_ENV, str(records))
    monkeypatch.setattr(target_module, "candidate_lib_dirs", lambda: [])
    wheel = make_wheel(tmp_path, {"kilntest/ext.so": libs["ext.so"]}, requires=("torch==9.1.0",))

    # libkilnblas.so.1 is loaded by torch but not recorded, libcuda.so.1 is the driver: neither vouches for
    # anything. c10::kiln_absent is torch's and torch lacks it: an error all the same.
    (lib,) = audit_paths([wheel]).artifacts[0].libraries
    results = {c.finding: c for c in _undefined(lib)}
    assert not results[""].ok and results[""].severity == "error"
    assert "1 undefined symbol(s) no needed library provides: _ZN3c1011kiln_absentEv" in results[""].detail
    assert "kilnblas_gemm" not in results[""].detail and "cuInit" not in results[""].detail
    unchecked = results["unchecked"]
    assert unchecked.severity == "warning"
    assert unchecked.detail.startswith(
        "kilntest/ext.so: 2 undefined symbol(s) not checked: no library whose exports are known provides them, and "
        "libkilnblas.so.1 (loaded by torch; symbols not recorded); libcuda.so.1 (the user's GPU driver; exports not "
        "recorded) may: ")
    assert sorted(unchecked.detail.rsplit(" may: ", 1)[1].removesuffix(".").split(", ")) == ["cuInit", "kilnblas_gemm"]
    assert unchecked.fix == ("nothing to fix in the library if they are that library's API; to check them, record the "
                             "exports of torch's runtime wheels (`scripts/kiln torch-abi --runtime SITE_PACKAGES`) or "
                             "audit where they are installed (--torch-lib DIR).")
    assert "2 undefined symbol(s) not checked" in unchecked.detail
    assert ("libkilnblas.so.1 (loaded by torch; symbols not recorded); libcuda.so.1 (the user's GPU driver; "
            "exports not recorded) may") in unchecked.detail
    assert "kilnblas_gemm" in unchecked.detail and "cuInit" in unchecked.detail
    assert "not found" not in results[""].detail

    # The runtime wheel torch requires, recorded: its symbols are now checked, one by one.
    site = _site_packages(tmp_path / "venv", "9.1.0+cu1", libs)
    made = run_kiln("torch-abi", "--runtime", str(site), "--out", str(records))
    assert made.returncode == 0, made.stderr
    assert (records / RUNTIME_DIR / "9.1.0+cu1.json").is_file()
    assert "nvidia-kilnblas==1.0" in made.stdout and "kilnwin" not in made.stdout
    from kiln_tool.audit import torch_abi

    torch_abi._load_record_cached.cache_clear()
    (lib,) = audit_paths([wheel]).artifacts[0].libraries
    results = {c.finding: c for c in _undefined(lib)}
    assert "_ZN3c1011kiln_absentEv" in results[""].detail
    assert "1 undefined symbol(s) not checked" in results["unchecked"].detail
    assert "cuInit" in results["unchecked"].detail and "kilnblas_gemm" not in results["unchecked"].detail


def test_runtime_record_refuses_a_site_without_the_required_wheels(libs: dict[str, bytes], tmp_path: Path) -> None:
    site = _site_packages(tmp_path / "venv", "9.1.0+cu1", libs)
    shutil.rmtree(site / "nvidia_kilnblas-1.0.dist-info")
    made = run_kiln("torch-abi", "--runtime", str(site), "--out", str(tmp_path / "records"))
    assert made.returncode == 2
    assert "nvidia-kilnblas==1.0" in made.stderr and "is not installed there" in made.stderr
    assert not (tmp_path / "records").exists()


def test_underlinked_through_torch(libs: dict[str, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    records = tmp_path / "records"
    torch = fake_torch_wheel(tmp_path / "torch", "9.2.0+cpu", {"libc10.so": libs["libc10.so"],
                                                           "libdep.so": libs["libdep.so"],
                                                           "libkilnblas.so.1": libs["libkilnblas.so.1"]})
    assert run_kiln("torch-abi", str(torch), "--out", str(records)).returncode == 0
    monkeypatch.setenv(DATA_DIR_ENV, str(records))
    monkeypatch.setattr(target_module, "candidate_lib_dirs", lambda: [])
    wheel = make_wheel(tmp_path, {"kilntest/under.so": libs["under.so"]}, requires=("torch==9.2.0",))
    (lib,) = audit_paths([wheel]).artifacts[0].libraries
    (result,) = _undefined(lib)
    assert not result.ok
    assert "kiln_dep (only in libdep.so, loaded by import torch, not in NEEDED)" in result.detail
    assert "no needed library provides" not in result.detail


def test_library_from_a_declared_dependency(libs: dict[str, bytes], tmp_path: Path) -> None:
    """A needed library that a Requires-Dist dependency ships (installed beside torch) is a warning naming
    that dependency, not 'not found'; an undeclared one stays an error."""
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    installed_torch(site, "9.3.0+cpu", {n: libs[n] for n in ("libc10.so", "libkilnblas.so.1")})
    installed_project(site, "kilndep", "1.0", {"kilndep/lib/libcuda.so.1": libs["libcuda.so.1"]})
    from kiln_tool.audit import AuditOptions
    from kiln_tool.audit.policy import load_policy

    policy = load_policy("manylinux_2_28")
    saved_drivers = dict(policy.driver_libraries)
    policy.driver_libraries.clear()  # here libcuda.so.1 stands for any library a dependency ships
    try:
        declared = make_wheel(tmp_path, {"kilntest/ext.so": libs["ext.so"]}, requires=("kilndep>=1",))
        (lib,) = audit_paths([declared], AuditOptions(torch_lib=site / "torch" / "lib")).artifacts[0].libraries
        results = {c.finding: c for c in _undefined(lib)}
        assert results["dependency"].severity == "warning"
        assert results["dependency"].detail == (
            "kilntest/ext.so needs libcuda.so.1, which the declared dependency kilndep 1.0 (Requires-Dist: kilndep>=1) "
            "ships: no RUNPATH of it reaches that library, so it loads only after the package has loaded it (ctypes "
            "preload, import order); its symbols were not checked.")
        assert results["dependency"].fix == ("add an $ORIGIN-relative RUNPATH to the dependency's library folder (e.g. "
                                             "$ORIGIN/../nvidia/cublas/lib), so it loads in any order.")
        assert "libcuda.so.1, which the declared dependency kilndep 1.0 (Requires-Dist: kilndep>=1) ships" in \
            results["dependency"].detail
        assert "not found" not in results[""].detail
        (tmp_path / "undeclared").mkdir()
        undeclared = make_wheel(tmp_path / "undeclared", {"kilntest/ext.so": libs["ext.so"]})
        (lib,) = audit_paths([undeclared], AuditOptions(torch_lib=site / "torch" / "lib")).artifacts[0].libraries
        results = {c.finding: c for c in _undefined(lib)}
        assert "dependency" not in results
        assert "needed libraries not found in the installed layout: libcuda.so.1" in results[""].detail
    finally:
        policy.driver_libraries.update(saved_drivers)
