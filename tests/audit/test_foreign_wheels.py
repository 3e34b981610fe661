"""Wheels kiln did not build (no build info): what only kiln's build info could say is "not checked", never a pass
text; the torch requirement is judged against what the binaries link (no pin, or one wider than the torch minor
torch's C++ ABI binds them to, is a finding); a needed library that an uninstalled declared dependency may ship is
unknown, not missing; auditwheel's grafted libcudart name counts as the CUDA runtime; and no check of one library
is both an ERROR and ok in one report. Built from small sources with gcc/g++ against the installed torch."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from audit_corpus import TORCH_LIB, installed_torch, make_wheel, patchelf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiln_tool.audit import AuditOptions, audit_paths
from kiln_tool.audit import target as target_module
from kiln_tool.audit.report import ArtifactReport, CheckResult

TAG = "cp311-cp311-manylinux_2_28_x86_64"
CXX = """
namespace c10 { struct Allocator; Allocator* GetCPUAllocator(); }
extern "C" __attribute__((visibility("default"))) void* kiln_alloc(void) { return c10::GetCPUAllocator(); }
"""
PLAIN = 'extern "C" __attribute__((visibility("default"))) int kiln_plain(int x) { return 2 * x; }\n'


def _build(tmp: Path, name: str, source: str, *flags: str) -> bytes:
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / f"{name}.cpp").write_text(source)
    subprocess.run(["g++", "-shared", "-fPIC", "-O1", "-fvisibility=hidden", "-Wl,-z,noexecstack",
                    "-Wl,--enable-new-dtags", "-Wl,-rpath,$ORIGIN/../torch/lib", "-o", name, f"{name}.cpp", *flags],
                   check=True, capture_output=True, cwd=tmp)
    return (tmp / name).read_bytes()


@pytest.fixture(scope="module")
def libs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    if shutil.which("g++") is None or not (TORCH_LIB / "libc10.so").is_file():
        pytest.skip("needs g++ and the installed torch")
    tmp = tmp_path_factory.mktemp("foreign-wheels")
    built = {
        # torch's C++ ABI: a c10:: function
        "cxx.so": _build(tmp, "cxx.so", CXX, f"-L{TORCH_LIB}", "-lc10"),
        # links libc10.so but binds none of its C++ symbols (as a LibTorch stable-ABI library's C shims do)
        "linked.so": _build(tmp, "linked.so", PLAIN, f"-L{TORCH_LIB}", "-Wl,--no-as-needed", "-lc10"),
        # links two of torch's libraries
        "both.so": _build(tmp, "both.so", PLAIN, f"-L{TORCH_LIB}", "-Wl,--no-as-needed", "-lc10", "-ltorch_cpu"),
        # links nothing of torch
        "plain.so": _build(tmp, "plain.so", PLAIN),
    }
    for name, needed in (("blas.so", "libkilnblas.so.1"), ("grafted.so", "libcudart-1a2b3c4d.so.12"),
                         ("user.so", "linked.so")):
        (tmp / name).write_bytes(_build(tmp, name, PLAIN))
        subprocess.run([patchelf(), "--add-needed", needed, str(tmp / name)], check=True, capture_output=True)
        built[name] = (tmp / name).read_bytes()
    return built


@pytest.fixture(autouse=True)
def installed_torch_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(target_module, "candidate_lib_dirs", lambda: [TORCH_LIB])


def _audit(tmp: Path, files: dict[str, bytes], requires: tuple[str, ...] = (), **kwargs: object) -> ArtifactReport:
    tmp.mkdir(parents=True, exist_ok=True)
    wheel = make_wheel(tmp, files, tag=TAG, requires=requires, **kwargs)  # type: ignore[arg-type]
    (artifact,) = audit_paths([wheel], AuditOptions()).artifacts
    return artifact


def _failed(artifact: ArtifactReport) -> dict[tuple[str, str], CheckResult]:
    return {(c.id, c.finding): c for _, c in artifact.rows() if not c.ok}


def _never_error_and_ok(artifact: ArtifactReport) -> None:
    for where in [None, *artifact.libraries]:
        results = artifact.checks if where is None else where.checks
        errors = {c.id for c in results if not c.ok and c.severity == "error"}
        assert not [c for c in results if c.ok and c.id in errors], results


def test_a_torch_extension_with_no_torch_requirement_is_a_finding(libs: dict[str, bytes], tmp_path: Path) -> None:
    artifact = _audit(tmp_path, {"kilntest/cxx.so": libs["cxx.so"]})
    found = _failed(artifact)
    pin = found[("wheel-tag", "torch-pin")]
    assert pin.severity == "error"
    assert "METADATA requires no torch, but kilntest/cxx.so links libc10.so: pip installs it beside any torch" in \
        " ".join(pin.detail.split())
    _never_error_and_ok(artifact)


@pytest.mark.parametrize(("requirement", "wider"), [
    ("torch==2.13.0", None), ("torch==2.13.*", None), ("torch>=2.13,<2.14", None),
    ("torch>=2.13", "2.14.0"), ("torch>=2.12,<2.14", "2.12.0"), ("torch<3,>=2.4", "2.14.0, 2.12.0"),
])
def test_a_pin_wider_than_the_torch_minor_of_cxx_symbols_is_a_finding(libs: dict[str, bytes], tmp_path: Path,
                                                                      requirement: str, wider: str | None) -> None:
    artifact = _audit(tmp_path, {"kilntest/cxx.so": libs["cxx.so"]}, (requirement,))
    pin = _failed(artifact).get(("wheel-tag", "torch-pin"))
    if wider is None:
        assert pin is None, pin
        (tag,) = [c for c in artifact.checks if c.id == "wheel-tag" and c.ok and "agree" in c.detail]
        assert "not checked: local version and CUDA variant against the build (the wheel has no kiln build info)" \
            in tag.detail and "torch pin" not in tag.detail
    else:
        assert pin is not None and f"allows {wider} (the target torch 2.13.0" in pin.detail
        assert "uses 1 symbol(s) of torch's C++ ABI" in pin.detail


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lower=st.sampled_from([None, "2.11", "2.12", "2.13", "2.13.0"]),
       upper=st.sampled_from([None, "2.13.1", "2.14", "2.15", "3"]))
def test_only_torch_cxx_symbols_bind_a_pin_to_one_minor(libs: dict[str, bytes],
                                                         tmp_path_factory: pytest.TempPathFactory,
                                                         lower: str | None, upper: str | None) -> None:
    """For any range that selects torch 2.13: a finding exactly when the range also admits 2.12 or 2.14 and the
    library binds torch's C++ ABI; a library that only links libc10.so (no C++ symbol) is never held to one minor."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    spec = ",".join(p for p in (f">={lower}" if lower else "", f"<{upper}" if upper else "") if p)
    if not SpecifierSet(spec).contains(Version("2.13.0")):
        return
    tmp = tmp_path_factory.mktemp("pin")
    wider = any(SpecifierSet(spec).contains(Version(v)) for v in ("2.12.0", "2.14.0"))
    cxx = _failed(_audit(tmp, {"kilntest/cxx.so": libs["cxx.so"]}, (f"torch{spec}",)))
    assert (("wheel-tag", "torch-pin") in cxx) == wider, (spec, cxx)
    linked = _failed(_audit(tmp, {"kilntest/linked.so": libs["linked.so"]}, (f"torch{spec}",), name="kilnlinked"))
    assert ("wheel-tag", "torch-pin") not in linked, spec


def test_a_library_an_uninstalled_declared_dependency_may_ship_is_unknown_not_missing(
        libs: dict[str, bytes], tmp_path: Path) -> None:
    declared = _audit(tmp_path / "a", {"kilntest/blas.so": libs["blas.so"]}, ("torch==2.13.0", "kilnblas-cu12>=1"))
    found = {k: c for k, c in _failed(declared).items() if k[0] == "undefined-symbols"}
    assert set(found) == {("undefined-symbols", "dependency-unknown")}, found
    check = found[("undefined-symbols", "dependency-unknown")]
    assert check.severity == "warning"
    assert "needs libkilnblas.so.1, which is in neither the wheel, torch nor the platform; the wheel declares " \
        "dependencies that are installed nowhere this audit runs ('kilnblas-cu12>=1'), which may ship it" \
        in check.detail
    assert "--fetch-dependencies" in check.fix
    assert "not found" not in " ".join(c.detail for _, c in declared.rows())
    _never_error_and_ok(declared)
    # Not declared: it is missing, an error.
    undeclared = _audit(tmp_path / "b", {"kilntest/blas.so": libs["blas.so"]}, ("torch==2.13.0", "numpy"))
    missing = _failed(undeclared)[("undefined-symbols", "")]
    assert missing.severity == "error" and "not found in the installed layout: libkilnblas.so.1" in missing.detail
    _never_error_and_ok(undeclared)


def test_the_cudart_name_auditwheel_grafts_is_the_cuda_runtime(libs: dict[str, bytes], tmp_path: Path) -> None:
    # A CPU build (build info cuda: null) whose library needs auditwheel's grafted libcudart-<hash>.so.12.
    info = {"version": "0.1.0", "python_tag": "cp311", "cuda": None, "torch_version": "2.13.0+cpu",
            "abi_mode": "torch", "cuda_tag": "cpu"}
    grafted = "kilntest.libs/libcudart-1a2b3c4d.so.12"
    artifact = _audit(tmp_path, {"kilntest/grafted.so": libs["grafted.so"], grafted: libs["blas.so"]},
                      ("torch==2.13.0",), build_info=info)
    tag = _failed(artifact)[("wheel-tag", "")]
    assert "a CPU build (build info cuda: null) whose binaries need libcudart.so.12" in tag.detail
    _never_error_and_ok(artifact)


def test_without_torch_no_torch_assumption_applies(libs: dict[str, bytes], tmp_path: Path) -> None:
    """Neither required nor linked: no 'torch's floor is unknown' (nor its --torch-lib fix); and a library that links
    torch but that another library of the wheel names in DT_NEEDED is a plain library, not an op library."""
    no_torch = _audit(tmp_path / "a", {"kilntest/blas.so": libs["grafted.so"]}, (), name="kilnplain")
    assert ("wheel-tag", "floor-unknown") not in _failed(no_torch)
    (tag,) = [c for c in no_torch.checks if c.id == "wheel-tag" and c.ok and "agree" in c.detail]
    assert "no torch is required or linked: torch's platform floor does not apply" in tag.detail
    dependency = _audit(tmp_path / "b", {"kilntest/linked.so": libs["linked.so"], "kilntest/user.so": libs["user.so"]},
                        ("torch==2.13.0",))
    (linked,) = [lib for lib in dependency.libraries if lib.path == "kilntest/linked.so"]
    (exports,) = [c for c in linked.checks if c.id == "exports"]
    assert exports.detail.startswith("library kilntest/linked.so exports"), exports.detail
    alone = _audit(tmp_path / "c", {"kilntest/linked.so": libs["linked.so"]}, ("torch==2.13.0",))
    (exports,) = [c for c in alone.libraries[0].checks if c.id == "exports"]
    assert exports.detail.startswith("op library (torch.ops.load_library) kilntest/linked.so exports"), exports.detail


FIX = ("declare the torch the binaries were built against in Requires-Dist: torch==X.Y.* for torch's C++ ABI "
       "(it changes every minor), torch>=X.Y for the LibTorch stable ABI only.")


def test_no_torch_requirement_names_the_wheel_what_links_torch_and_the_fix(libs: dict[str, bytes],
                                                                          tmp_path: Path) -> None:
    """The finding names the wheel file, the first library linking torch (and how many more do), every torch
    library that one links, and the fix."""
    artifact = _audit(tmp_path, {"kilntest/a.so": libs["both.so"], "kilntest/b.so": libs["cxx.so"]})
    pin = _failed(artifact)[("wheel-tag", "torch-pin")]
    assert pin.detail == (f"kilntest-0.1.0-{TAG}.whl: METADATA requires no torch, but kilntest/a.so (and 1 more) "
                          "links libc10.so, libtorch_cpu.so: pip installs it beside any torch (or none), where it "
                          "fails to load.")
    assert pin.fix == FIX


def test_a_wide_pin_names_the_wheel_the_minors_it_allows_and_the_fix(libs: dict[str, bytes], tmp_path: Path) -> None:
    from kiln_tool.audit.target import torch_version_at

    version = torch_version_at(TORCH_LIB)
    artifact = _audit(tmp_path, {"kilntest/cxx.so": libs["cxx.so"]}, ("torch>=2.13",))
    pin = _failed(artifact)[("wheel-tag", "torch-pin")]
    assert pin.severity == "error"
    assert pin.detail == (f"kilntest-0.1.0-{TAG}.whl: torch requirement 'torch>=2.13' allows 2.14.0 (the target "
                          f"torch {version}, chosen by that requirement), but kilntest/cxx.so uses 1 symbol(s) of "
                          "torch's C++ ABI, which changes every minor: it fails to load (undefined symbol) on another "
                          "minor.")
    assert pin.fix == FIX


@pytest.mark.parametrize(("requirement", "finding"), [("torch>=9.0", True), ("torch>9.0,<9.1", False)])
def test_without_a_target_torch_only_an_open_upper_bound_is_judged(libs: dict[str, bytes], tmp_path: Path,
                                                                   requirement: str, finding: bool) -> None:
    """No torch the requirement selects is installed or recorded: a pin with no upper bound still admits every later
    minor; a bounded one cannot be compared with a torch, so it is no finding."""
    artifact = _audit(tmp_path, {"kilntest/cxx.so": libs["cxx.so"]}, (requirement,))
    pin = _failed(artifact).get(("wheel-tag", "torch-pin"))
    if not finding:
        assert pin is None, pin
        return
    assert pin is not None and pin.detail == (
        f"kilntest-0.1.0-{TAG}.whl: torch requirement 'torch>=9.0' allows any later torch (no upper bound), but "
        "kilntest/cxx.so uses 1 symbol(s) of torch's C++ ABI, which changes every minor: it fails to load (undefined "
        "symbol) on another minor.")


def test_a_kiln_build_for_a_torch_keeps_the_torch_floor_without_a_requirement_or_link(libs: dict[str, bytes],
                                                                                      tmp_path: Path) -> None:
    """Build info naming a torch (not installed here) says torch applies even where METADATA requires none and no
    binary links it: the missing pin is an error and the floor is unknown, not "does not apply"."""
    info = {"version": "0.1.0", "python_tag": "cp311", "cuda": None, "torch_version": "9.9.0+cpu",
            "abi_mode": "torch", "cuda_tag": "cpu"}
    artifact = _audit(tmp_path, {"kilntest/plain.so": libs["plain.so"]}, (), build_info=info)
    found = _failed(artifact)
    assert "METADATA has no torch requirement, but the binaries only work with torch 9.9.0" in \
        found[("wheel-tag", "")].detail
    assert ("wheel-tag", "floor-unknown") in found
    assert "does not apply" not in " ".join(c.detail for _, c in artifact.rows())


def test_a_target_torch_of_minor_zero_has_no_older_minor(libs: dict[str, bytes], tmp_path: Path) -> None:
    """Against torch 3.0: the next minor (3.1) is the only other one a C++ ABI pin may leak to."""
    lib_dir = installed_torch(tmp_path / "site", "3.0.0+cpu", {"libc10.so": libs["plain.so"]})
    wheel = make_wheel(tmp_path, {"kilntest/cxx.so": libs["cxx.so"]}, tag=TAG, requires=("torch>=2.9",))
    (artifact,) = audit_paths([wheel], AuditOptions(torch_lib=lib_dir)).artifacts
    pin = _failed(artifact)[("wheel-tag", "torch-pin")]
    assert "torch requirement 'torch>=2.9' allows 3.1.0 (the target torch 3.0.0+cpu, chosen by that requirement)" \
        in pin.detail


def test_a_kiln_build_is_judged_by_its_build_infos_torch_not_again_as_a_foreign_wheel(libs: dict[str, bytes],
                                                                                      tmp_path: Path) -> None:
    """Build info naming the torch: a missing requirement is told once, against that torch; the foreign wheels'
    torch-pin finding (judged from what the binaries link) is not added beside it."""
    info = {"version": "0.1.0", "python_tag": "cp311", "cuda": None, "torch_version": "2.13.0+cpu",
            "abi_mode": "torch", "cuda_tag": "cpu"}
    artifact = _audit(tmp_path, {"kilntest/cxx.so": libs["cxx.so"]}, (), build_info=info)
    found = _failed(artifact)
    assert "METADATA has no torch requirement, but the binaries only work with torch 2.13.0" in \
        found[("wheel-tag", "")].detail
    assert ("wheel-tag", "torch-pin") not in found, found


def test_a_library_any_uninstalled_dependency_may_ship_is_unknown_whatever_its_name(
        libs: dict[str, bytes], tmp_path: Path) -> None:
    """Issue 44: the extension needs libcue_ops.so, which the declared, uninstalled acme-ops-cu13 ships: the
    names share nothing, so the evidence is that it is nowhere the audit can see and a declared dependency is
    not here to look into. Installed dependencies, torch, an extra's and another platform's are not that."""
    cue = _needing(tmp_path, libs, "libcue_ops.so")
    requires = ("torch==2.13.0", "numpy", "acme-ops-cu13>=1", "kilnextra; extra == 'dev'",
                "kilnwin; sys_platform == 'win32'")
    found = _failed(_audit(tmp_path / "a", {"kilntest/cue.so": cue}, requires))
    unknown = found[("undefined-symbols", "dependency-unknown")]
    assert unknown.severity == "warning" and ("undefined-symbols", "") not in found
    assert "the wheel declares dependencies that are installed nowhere this audit runs ('acme-ops-cu13>=1'), " \
        "which may ship it" in unknown.detail, unknown.detail
    # Only installed ones (numpy is, in torch's site-packages): the library is missing, an error.
    only_installed = _failed(_audit(tmp_path / "b", {"kilntest/cue.so": cue}, ("torch==2.13.0", "numpy")))
    assert only_installed[("undefined-symbols", "")].severity == "error"
    assert ("undefined-symbols", "dependency-unknown") not in only_installed


def _needing(tmp: Path, libs: dict[str, bytes], needed: str, runpath: str = "$ORIGIN/../torch/lib") -> bytes:
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / f"needs-{needed}-{abs(hash(runpath))}.so"
    path.write_bytes(libs["plain.so"])
    subprocess.run([patchelf(), "--add-needed", needed, "--set-rpath", runpath, str(path)], check=True,
                   capture_output=True)
    return path.read_bytes()


@pytest.fixture(scope="module")
def dependency_index(libs: dict[str, bytes], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A find-links folder pip downloads from: acme-ops-cu13 ships libcue_ops.so in acme_ops/lib (and, as
    .data/platlib, libcue_extra.so in acme_ops/lib too); acme-empty ships no library."""
    index = tmp_path_factory.mktemp("dependency-index")
    make_wheel(index, {"acme_ops/lib/libcue_ops.so": libs["plain.so"], "acme_ops/__init__.py": b""},
               name="acme_ops_cu13", version="1.2.0", tag="py3-none-manylinux_2_28_x86_64",
               extra_members={"acme_ops_cu13-1.2.0.data/platlib/acme_ops/lib/libcue_extra.so": libs["plain.so"],
                              "acme_ops_cu13-1.2.0.data/scripts/libcue_script.so": libs["plain.so"]})
    make_wheel(index, {"acme_empty/__init__.py": b""}, name="acme_empty", version="1.0.0",
               tag="py3-none-manylinux_2_28_x86_64")
    return index


@pytest.mark.parametrize(("needed", "runpath", "requires", "expect"), [
    ("libcue_ops.so", "$ORIGIN/../acme_ops/lib", "acme-ops-cu13", "reached"),
    ("libcue_extra.so", "$ORIGIN/../torch/lib:$ORIGIN/../acme_ops/lib", "acme-ops-cu13", "reached"),
    ("libcue_ops.so", "$ORIGIN/../torch/lib", "acme-ops-cu13", "unreached"),
    ("libcue_script.so", "$ORIGIN/../acme_ops/lib", "acme-ops-cu13", "missing"),  # .data/scripts: not site-packages
    ("libcue_ops.so", "$ORIGIN/../acme_ops/lib", "acme-empty", "missing"),
])
def test_fetch_dependencies_reads_the_dependencies_wheels(
        libs: dict[str, bytes], dependency_index: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        needed: str, runpath: str, requires: str, expect: str) -> None:
    """--fetch-dependencies: pip download --no-deps of the uninstalled dependencies (real pip, from a local
    find-links folder), then their file lists: shipped where the RUNPATH reaches (no finding), shipped elsewhere
    (the 'dependency' warning), or shipped by none (missing, an error)."""
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(dependency_index))
    wheel = make_wheel(tmp_path, {"kilntest/cue.so": _needing(tmp_path, libs, needed, runpath)}, tag=TAG,
                       requires=("torch==2.13.0", requires))
    (artifact,) = audit_paths([wheel], AuditOptions(fetch_dependencies=True)).artifacts
    found = {k: c for k, c in _failed(artifact).items() if k[0] == "undefined-symbols"}
    assert ("undefined-symbols", "dependency-unknown") not in found
    if expect == "reached":
        assert found == {}, found
        (row,) = [c for _, c in artifact.rows() if c.ok and "ships as acme_ops/lib/" in c.detail]
        assert f"{needed}, which the declared dependency acme_ops_cu13 1.2.0 (Requires-Dist: acme-ops-cu13) ships " \
            f"as acme_ops/lib/{needed}" in row.detail
    elif expect == "unreached":
        assert set(found) == {("undefined-symbols", "dependency")}, found
        assert found[("undefined-symbols", "dependency")].severity == "warning"
        assert "no RUNPATH of it reaches that folder" in found[("undefined-symbols", "dependency")].detail
    else:
        missing = found[("undefined-symbols", "")]
        assert missing.severity == "error"
        assert f"none of the declared dependencies' wheels ships {needed} (downloaded with pip download --no-deps: " \
            f"{requires})" in missing.detail, missing.detail


def test_fetch_dependencies_that_cannot_be_downloaded_is_an_input_error(
        libs: dict[str, bytes], dependency_index: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kiln_tool.audit import AuditInputError

    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(dependency_index))
    wheel = make_wheel(tmp_path, {"kilntest/cue.so": _needing(tmp_path, libs, "libcue_ops.so")}, tag=TAG,
                       requires=("torch==2.13.0", "acme-nowhere>=1"))
    with pytest.raises(AuditInputError, match=r"^--fetch-dependencies: pip download --no-deps 'acme-nowhere>=1' "
                                              r"failed: "):
        audit_paths([wheel], AuditOptions(fetch_dependencies=True))


CORE = ('extern "C" __attribute__((visibility("default"))) int kiln_core_api(int x) { return x + 1; }\n'
        'extern "C" __attribute__((visibility("default"))) int kiln_core_internal(int x) { return x - 1; }\n')
CORE_API_ONLY = 'extern "C" __attribute__((visibility("default"))) int kiln_core_api(int x) { return x + 1; }\n'
CORE_USER = ('extern "C" int kiln_core_api(int);\n'
             '__attribute__((used)) static int use(int x) { return kiln_core_api(x); }\n')


@pytest.fixture(scope="module")
def sibling_libs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    if shutil.which("g++") is None:
        pytest.skip("needs g++")
    tmp = tmp_path_factory.mktemp("siblings")
    built = {"libcore.so": _build(tmp, "libcore.so", CORE),
             "user.so": _build(tmp, "user.so", CORE_USER, f"-L{tmp}", "-lcore", "-Wl,-rpath,$ORIGIN")}
    built["api/libcore.so"] = _build(tmp / "api", "libcore.so", CORE_API_ONLY)
    return built


def _exports_of(artifact: ArtifactReport, member: str) -> CheckResult:
    (lib,) = [lib for lib in artifact.libraries if lib.path == member]
    (check,) = [c for c in lib.checks if c.id == "exports"]
    return check


def test_exports_that_other_libraries_of_the_wheel_import_are_not_leaks(sibling_libs: dict[str, bytes],
                                                                        tmp_path: Path) -> None:
    """Round 3's open case: a library's exports that another library of the same wheel imports (names it in
    DT_NEEDED, leaves the symbol undefined) are its API inside the wheel: hiding them, as the fix said, breaks
    that library. Judged by that evidence; the other exports stay leaks, and the fix says which to keep."""
    user = sibling_libs["user.so"]
    api_only = _audit(tmp_path / "a", {"kilntest/libcore.so": sibling_libs["api/libcore.so"], "kilntest/user.so": user})
    check = _exports_of(api_only, "kilntest/libcore.so")
    assert check.ok, check.detail
    assert "1 export(s) that kilntest/user.so of the same wheel import (kiln_core_api)" in check.detail
    both = _audit(tmp_path / "b", {"kilntest/libcore.so": sibling_libs["libcore.so"], "kilntest/user.so": user})
    check = _exports_of(both, "kilntest/libcore.so")
    assert not check.ok and "exports 1 symbol(s) no allowlist covers: kiln_core_internal;" in check.detail
    assert check.fix.startswith("hide them (keep the 1 that other libraries of the wheel import: kiln_core_api)")
    # Without the library that imports it, the same export is a leak like any other.
    alone = _audit(tmp_path / "c", {"kilntest/libcore.so": sibling_libs["api/libcore.so"]})
    check = _exports_of(alone, "kilntest/libcore.so")
    assert not check.ok and "exports 1 symbol(s) no allowlist covers: kiln_core_api." in check.detail
