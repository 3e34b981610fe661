"""Each check against a library built to break it, and against one that is right."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from audit_corpus import PY_SUFFIX, TORCH_LIB, Corpus, make_wheel, run_kiln

from kiln_tool.audit import AuditOptions, CheckResult, audit_paths


def checks_of(path: Path, **options: object) -> dict[str, CheckResult]:
    report = audit_paths([path], AuditOptions(**options))  # type: ignore[arg-type]
    (library,) = report.artifacts[0].libraries
    return {c.id: c for c in library.checks if not c.finding}


def test_clean_extension_passes_every_check(corpus: Corpus) -> None:
    checks = checks_of(corpus[f"clean{PY_SUFFIX}"])
    assert all(c.ok for c in checks.values()), {i: c.detail for i, c in checks.items() if not c.ok}
    assert checks["exports"].detail == "exports only PyInit_clean"


def test_textrel(corpus: Corpus) -> None:
    check = checks_of(corpus["libtextrel.so"])["textrel"]
    assert not check.ok
    assert "DT_TEXTREL" in check.detail and "-fPIC" in check.fix
    assert checks_of(corpus["libplain.so"])["textrel"].ok


def test_exec_stack(corpus: Corpus) -> None:
    check = checks_of(corpus["libexecstack.so"])["exec-stack"]
    assert not check.ok
    assert "noexecstack" in check.fix
    assert checks_of(corpus["libplain.so"])["exec-stack"].ok


def test_exports_of_extension_module(corpus: Corpus) -> None:
    check = checks_of(corpus[f"leaky{PY_SUFFIX}"])["exports"]
    assert not check.ok
    assert "leaky_helper" in check.detail and "leaky_table" in check.detail
    assert "PyInit_leaky" not in check.detail.split("besides")[0].split("exports")[-1]


def test_exports_allowlist_for_other_libraries(corpus: Corpus) -> None:
    leaky = corpus["libtextrel.so"]  # exports kiln_value and kiln_textrel
    assert not checks_of(leaky)["exports"].ok
    assert checks_of(leaky, extra_exports=("kiln_*",))["exports"].ok


def test_rpath_absolute_and_relative(corpus: Corpus) -> None:
    check = checks_of(corpus["librpath.so"])["rpath"]
    assert not check.ok
    assert "'/opt/buildbot/lib' is absolute" in check.detail
    assert "'lib' is relative to the current working directory" in check.detail
    assert "RUNPATH has an empty entry" in check.detail
    assert "$ORIGIN/../torch/lib" not in check.detail


def test_build_paths_in_debug_info(corpus: Corpus) -> None:
    lib = corpus["libbuildpath.so"]
    check = checks_of(lib)["build-paths"]
    assert not check.ok
    assert str(lib.parent.parent / "src") in check.detail
    assert ".debug_" in check.detail
    assert checks_of(corpus["libplain.so"])["build-paths"].ok


def test_build_paths_not_runtime_paths(corpus: Corpus) -> None:
    check = checks_of(corpus["libpaths.so"])["build-paths"]
    assert not check.ok
    assert "'/tmp/pip-req-build-x1y2/ops/kernel.cpp' in .rodata" in check.detail
    assert "kiln_runtime.log" not in check.detail


def test_undefined_symbol(corpus: Corpus) -> None:
    check = checks_of(corpus["libundefined.so"])["undefined-symbols"]
    assert not check.ok
    assert "kiln_nowhere" in check.detail


def test_needed_library_not_reachable(corpus: Corpus) -> None:
    check = checks_of(corpus["libneedsdep.so"])["undefined-symbols"]
    assert not check.ok
    assert "libdep.so" in check.detail and "kiln_dep" in check.detail


def test_a_symbol_of_the_needed_closure_binds(corpus: Corpus) -> None:
    # ld.so searches a library's whole NEEDED closure, which always loads with it: no finding, but said.
    check = checks_of(corpus["libunder.so"])["undefined-symbols"]
    assert check.ok, check.detail
    assert "bound in libraries its NEEDED closure loads (not named in its own DT_NEEDED): 1 from libdep.so" \
        in check.detail


def test_system_symbols_resolve_with_versions(corpus: Corpus) -> None:
    checks = checks_of(corpus["libnewglibc.so"])
    assert checks["undefined-symbols"].ok, checks["undefined-symbols"].detail


def test_symbol_versions_above_policy(corpus: Corpus) -> None:
    lib = corpus["libnewglibc.so"]
    check = checks_of(lib)["symbol-versions"]
    assert not check.ok
    assert "GLIBC_2.34" in check.detail and "pthread_create" in check.detail and "manylinux_2_28" in check.detail
    assert checks_of(lib, policy="manylinux_2_39")["symbol-versions"].ok


def test_cxx11_abi_mismatch(corpus: Corpus) -> None:
    if not (TORCH_LIB / "libc10.so").exists():
        pytest.skip("no torch in this interpreter")
    old = checks_of(corpus["liboldabi.so"], torch_lib=TORCH_LIB)["cxx11-abi"]
    assert not old.ok
    assert "_ZN3c109kiln_warnERKSs" in old.detail and "-D_GLIBCXX_USE_CXX11_ABI=1" in old.fix
    assert checks_of(corpus["libnewabi.so"], torch_lib=TORCH_LIB)["cxx11-abi"].ok


def test_registration_needs_an_initializer(corpus: Corpus) -> None:
    lazy = checks_of(corpus["libregister_lazy.so"])["registration"]
    assert not lazy.ok
    assert "TorchLibraryInit" in lazy.detail
    assert checks_of(corpus["libregister.so"])["registration"].ok


def test_registration_namespace_twice_in_one_wheel(corpus: Corpus, tmp_path: Path) -> None:
    lib = corpus["libregister.so"].read_bytes()
    wheel = make_wheel(tmp_path, {"kilntest/libone.so": lib, "kilntest/libtwo.so": lib})
    report = audit_paths([wheel])
    (check,) = [c for c in report.artifacts[0].checks if c.id == "registration"]
    assert not check.ok
    assert "'kilntest' is defined (TORCH_LIBRARY) by 2 libraries" in check.detail


def test_registration_stripped_libraries_use_the_build_info(corpus: Corpus, tmp_path: Path) -> None:
    stripped = tmp_path / "libregister.so"
    shutil.copy(corpus["libregister.so"], stripped)
    import subprocess

    subprocess.run(["strip", "--strip-all", str(stripped)], check=True)
    info = {"ops": ["kilntest::twice"]}
    data = stripped.read_bytes()
    twice = make_wheel(tmp_path, {"kilntest/liba.so": data, "kilntest/libb.so": data}, build_info=info)
    (check,) = [c for c in audit_paths([twice]).artifacts[0].checks if c.id == "registration"]
    assert not check.ok and "'kilntest'" in check.detail
    (out := tmp_path / "once").mkdir()
    once = make_wheel(out, {"kilntest/liba.so": data}, build_info=info)
    (check,) = [c for c in audit_paths([once]).artifacts[0].checks if c.id == "registration"]
    assert check.ok, check.detail


def test_registration_missing_for_listed_ops(corpus: Corpus, tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, {f"kilntest/clean{PY_SUFFIX}": corpus[f"clean{PY_SUFFIX}"].read_bytes()},
                       build_info={"ops": ["kilntest::twice"]})
    (check,) = [c for c in audit_paths([wheel]).artifacts[0].checks if c.id == "registration"]
    assert not check.ok
    assert "no library in the wheel registers them" in check.detail


def test_elf_valid_empty_truncated_foreign(corpus: Corpus, tmp_path: Path) -> None:
    good = corpus["libplain.so"].read_bytes()
    members = {"kilntest/libempty.so": b"", "kilntest/libcut.so": good[: len(good) // 3],
               "kilntest/libtext.so": b"this is not a library\n"}
    if (corpus.dir / "libf32.so").exists():
        members["kilntest/libf32.so"] = (corpus.dir / "libf32.so").read_bytes()
    report = audit_paths([make_wheel(tmp_path, members)])
    results = {lib.path: lib.checks for lib in report.artifacts[0].libraries}
    for member, expected in [("kilntest/libempty.so", "empty file"), ("kilntest/libcut.so", "truncated"),
                             ("kilntest/libtext.so", "not an ELF file"), ("kilntest/libf32.so", "foreign ELF")]:
        if member not in results:
            continue
        (check,) = results[member]
        assert check.id == "elf-valid" and not check.ok
        assert expected in check.detail, check.detail


def test_combination_reports_every_defect(corpus: Corpus) -> None:
    result = run_kiln("audit", "--json", str(corpus["libcombo.so"]))
    assert result.returncode == 1, result.stderr
    document = json.loads(result.stdout)
    (library,) = document["artifacts"][0]["libraries"]
    failed = {c["id"] for c in library["checks"] if not c["ok"]}
    assert {"textrel", "exec-stack", "rpath", "exports", "build-paths"} <= failed
    for check in library["checks"]:
        if not check["ok"]:
            assert check["fix"] and "Fix:" in check["detail"]


def test_text_output_lists_failures_first_with_fixes(corpus: Corpus) -> None:
    result = run_kiln("audit", str(corpus["libcombo.so"]), str(corpus[f"clean{PY_SUFFIX}"]))
    assert result.returncode == 1
    combo = result.stdout.split("== ")[1]
    rows = [line.split()[0] for line in combo.splitlines() if line.startswith("   ") and line.split()[0] in
            ("ERROR", "warn", "ok")]
    assert rows[0] == "ERROR" and "ok" in rows
    assert rows.index("ok") > max(i for i, r in enumerate(rows) if r in ("ERROR", "warn"))
    assert "fix: " in combo
    # Passes are folded into one line per library unless --verbose.
    assert sum(1 for r in rows if r == "ok") == 1
    verbose = run_kiln("audit", "--verbose", str(corpus["libcombo.so"]))
    assert sum(1 for line in verbose.stdout.splitlines() if line.startswith("   ok ")) > 1


def test_record_and_wheel_tag(corpus: Corpus, tmp_path: Path) -> None:
    module = corpus[f"clean{PY_SUFFIX}"].read_bytes()
    bad_tag = make_wheel(tmp_path, {f"kilntest/clean{PY_SUFFIX}": module}, tag="cp312-cp312-manylinux_2_28_x86_64")
    checks = {c.id: c for c in audit_paths([bad_tag]).artifacts[0].checks if not c.finding}
    assert not checks["wheel-tag"].ok and "cp311" in checks["wheel-tag"].detail
    assert checks["record"].ok

    (tampered_dir := tmp_path / "tampered").mkdir()
    good = make_wheel(tampered_dir, {f"kilntest/clean{PY_SUFFIX}": module, "kilntest/__init__.py": b""})
    import zipfile

    tampered = tampered_dir / "t" / good.name
    tampered.parent.mkdir()
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(tampered, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(info, b"print('changed')\n" if info.filename == "kilntest/__init__.py" else data)
        dst.writestr("kilntest/extra.py", b"")
    checks = {c.id: c for c in audit_paths([tampered]).artifacts[0].checks if not c.finding}
    assert not checks["record"].ok
    assert "kilntest/__init__.py: sha256" in checks["record"].detail
    assert "kilntest/extra.py is not in RECORD" in checks["record"].detail


def test_wheel_tag_torch_pin_and_floor(corpus: Corpus, tmp_path: Path) -> None:
    if not (TORCH_LIB / "libc10.so").exists():
        pytest.skip("no torch in this interpreter")
    from kiln_tool.audit.target import torch_version_at

    torch_version = torch_version_at(TORCH_LIB)
    assert torch_version is not None
    public = torch_version.split("+")[0]
    major, minor = public.split(".")[:2]
    info = {"torch_version": torch_version, "cuda": None, "cuda_tag": "cpu", "python_tag": "cp311",
            "version": f"0.1.0+pt{major}{minor}cpu", "cxx11_abi": True}
    module = {f"kilntest/clean{PY_SUFFIX}": corpus[f"clean{PY_SUFFIX}"].read_bytes()}
    good = make_wheel(tmp_path, module, version=f"0.1.0+pt{major}{minor}cpu", build_info=info,
                      requires=(f"torch=={public}",))
    tag = {c.id: c for c in audit_paths([good]).artifacts[0].checks if not c.finding}["wheel-tag"]
    assert tag.ok and tag.detail == "tags, version, torch pin and binaries agree"
    (loose := tmp_path / "loose").mkdir()
    wheel = make_wheel(loose, module, version=f"0.1.0+pt{major}{minor}cpu", build_info=info,
                       requires=(f"torch>={public}",), tag="cp311-cp311-manylinux_2_17_x86_64")
    results = audit_paths([wheel]).artifacts[0].checks
    check = {c.id: c for c in results if not c.finding}["wheel-tag"]
    assert not check.ok and check.is_error
    assert f"allows torch {major}.{int(minor) + 1}.0" in check.detail
    # Below torch's own floor: pip would install it where torch cannot run; nothing breaks that torch
    # itself does not already break, so a warning (data/audit_policy/common.json "severity").
    below = next(c for c in results if c.finding == "below-floor")
    assert below.is_warning and "manylinux_2_17_x86_64 is below manylinux_2_28" in below.detail


def test_floor_is_unknown_without_a_torch(corpus: Corpus, tmp_path: Path) -> None:
    module = {f"kilntest/clean{PY_SUFFIX}": corpus[f"clean{PY_SUFFIX}"].read_bytes()}
    # Torch is required (so its floor applies) but neither installed nor recorded.
    wheel = make_wheel(tmp_path, module, tag="cp311-cp311-manylinux_2_17_x86_64", requires=("torch==9.9.0",))
    results = audit_paths([wheel], AuditOptions(policy="manylinux_2_34")).artifacts[0].checks
    unknown = next(c for c in results if c.finding == "floor-unknown")
    assert unknown.is_warning and "the platform floor (torch's own manylinux tag) is unknown" in unknown.detail
    # Not taken from --policy: no "below manylinux_2_34" claim.
    assert not any("below manylinux_2_34" in c.detail for c in results)


def test_version_need_without_needed_entry(corpus: Corpus) -> None:
    check = checks_of(corpus["libneedsver.so"])["undefined-symbols"]
    assert not check.ok
    assert "version needs name libraries missing from DT_NEEDED: libdepv.so" in check.detail
    assert "kiln_dep@KILN_1.0" in check.detail


def test_interpreter_symbols_are_provided_to_extension_modules(corpus: Corpus) -> None:
    module = corpus[f"clean{PY_SUFFIX}"]
    checks = checks_of(module)
    assert checks["undefined-symbols"].ok, checks["undefined-symbols"].detail
    from kiln_tool.audit.elf import ElfLibrary

    assert any(s.name == "PyLong_FromLong" and not s.defined for s in ElfLibrary.open(module).dynamic_symbols)


def test_wheel_tag_cuda_runtime_against_build_info(corpus: Corpus, tmp_path: Path) -> None:
    lib = corpus["libcudart_user.so"].read_bytes()
    cpu = make_wheel(tmp_path, {"kilntest/libcudart_user.so": lib}, build_info={"cuda": None})
    check = {c.id: c for c in audit_paths([cpu]).artifacts[0].checks if not c.finding}["wheel-tag"]
    assert not check.ok and "a CPU build (build info cuda: null) whose binaries need libcudart.so.13" in check.detail
    (other := tmp_path / "cu128").mkdir()
    cu128 = make_wheel(other, {"kilntest/libcudart_user.so": lib}, build_info={"cuda": "12.8"})
    check = {c.id: c for c in audit_paths([cu128]).artifacts[0].checks if not c.finding}["wheel-tag"]
    assert not check.ok and "built for CUDA 12.8 but the binaries need libcudart.so.13" in check.detail


def test_damaged_version_table_is_reported_not_raised(corpus: Corpus, tmp_path: Path) -> None:
    from kiln_tool.audit.elf import ElfLibrary

    data = bytearray(corpus["libnewglibc.so"].read_bytes())
    (offset, size) = next((o, s) for n, o, s in ElfLibrary.from_bytes(bytes(data), "x").allocated_sections()
                          if n == ".gnu.version_r")
    data[offset:offset + size] = bytes(size)
    damaged = tmp_path / "libdamaged.so"
    damaged.write_bytes(bytes(data))
    result = run_kiln("audit", str(damaged))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "ERROR elf-valid" in result.stdout and "corrupt ELF" in result.stdout


def test_wheel_tag_stable_abi_mode(corpus: Corpus, tmp_path: Path) -> None:
    info = {"abi_mode": "stable", "torch_version": "2.13.0+cpu", "torch_min": "2.11", "cuda": None,
            "cuda_tag": "cpu", "python_tag": "cp310-abi3", "version": "0.1.0+cpu"}
    module = {"kilntest/libplain.so": corpus["libplain.so"].read_bytes()}
    good = make_wheel(tmp_path, module, version="0.1.0+cpu", build_info=info, requires=("torch>=2.11",),
                      tag="cp310-abi3-manylinux_2_28_x86_64")
    check = {c.id: c for c in audit_paths([good]).artifacts[0].checks if not c.finding}["wheel-tag"]
    assert check.ok, check.detail
    (bad_dir := tmp_path / "bad").mkdir()
    bad = make_wheel(bad_dir, module, version="0.1.0+pt213cpu", build_info={**info, "version": None},
                     requires=("torch>=2.12",), tag="cp310-abi3-manylinux_2_28_x86_64")
    check = {c.id: c for c in audit_paths([bad]).artifacts[0].checks if not c.finding}["wheel-tag"]
    assert not check.ok
    assert "local version '+pt213cpu' does not name the build's CUDA variant ('+cpu')" in check.detail
    assert "excludes torch 2.11, the stable-ABI floor" in check.detail


def test_cuda_build_without_device_code(corpus: Corpus, tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, {"kilntest/libplain.so": corpus["libplain.so"].read_bytes()},
                       build_info={"cuda": "13.0", "cuda_archs": ["8.0", "9.0+PTX"]})
    (check,) = [c for c in audit_paths([wheel]).artifacts[0].checks if c.id == "cuda-sass"]
    assert not check.ok and "no library in the wheel carries device code" in check.detail


def test_a_sibling_reached_only_by_preload_is_a_warning(corpus: Corpus, tmp_path: Path) -> None:
    # pkg/libneedsdep.so needs libdep.so, which sits in pkg/sub/ where no RUNPATH of it looks.
    files = {"kilntest/libneedsdep.so": corpus["libneedsdep.so"].read_bytes(),
             "kilntest/sub/libdep.so": corpus["sub/libdep.so"].read_bytes()}
    lonely = make_wheel(tmp_path, files)
    libs = {lib.path: lib for lib in audit_paths([lonely]).artifacts[0].libraries}
    results = libs["kilntest/libneedsdep.so"].checks
    preload = next(c for c in results if c.finding == "preload")
    assert preload.is_warning and "no library of the wheel reaches it" in preload.detail
    main = next(c for c in results if c.id == "undefined-symbols" and not c.finding)
    assert main.ok, main.detail  # kiln_dep resolves from the preloaded sibling
    # A sibling that reaches it through its own RUNPATH ($ORIGIN of sub/) is named.
    (with_mid := tmp_path / "mid").mkdir()
    files["kilntest/sub/libmid.so"] = corpus["sub/libmid.so"].read_bytes()
    report = audit_paths([make_wheel(with_mid, files)])
    errors = [(where, c.id) for where, c in report.artifacts[0].rows() if c.is_error]
    assert all(check == "exports" for _, check in errors), errors  # kiln_dep/kiln_mid are public on purpose
    libs = {lib.path: lib for lib in report.artifacts[0].libraries}
    preload = next(c for c in libs["kilntest/libneedsdep.so"].checks if c.finding == "preload")
    assert "needed by kilntest/sub/libmid.so, which finds it through its own search path" in preload.detail
