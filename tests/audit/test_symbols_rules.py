"""undefined-symbols and symbol-versions (audit/checks/symbols.py) rule by rule, on libraries built from tiny C
sources with the real compiler and laid out in a wheel: which definition provides a versioned and an unversioned
reference, what is said when a needed library or a symbol is missing, the counts per provider, the target
torch's part, and symbol versions above the policy, with the words a maintainer reads."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from audit_corpus import HARDENED, installed_project, installed_torch, make_wheel, patchelf

from kiln_tool.audit import AuditOptions, CheckResult, audit_paths

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is needed")

FIX = ("link every library whose symbols you use (and nothing else) with $ORIGIN-relative RUNPATHs; build against "
       "exactly the torch the wheel pins (a symbol missing from it means another torch version's headers); pass "
       "--torch-lib DIR to audit against another torch.")

# kiln_v in two versions (KILN_1.0 hidden, KILN_2.0 the default), kiln_old only as a hidden KILN_1.0, kiln_plain
# in KILN_2.0.
PROVIDER = """
__attribute__((visibility("default"))) int kiln_v1(void) { return 1; }
__attribute__((visibility("default"))) int kiln_v2(void) { return 2; }
__attribute__((visibility("default"))) int kiln_old1(void) { return 3; }
__attribute__((visibility("default"))) int kiln_plain(void) { return 4; }
__asm__(".symver kiln_v1, kiln_v@KILN_1.0");
__asm__(".symver kiln_v2, kiln_v@@KILN_2.0");
__asm__(".symver kiln_old1, kiln_old@KILN_1.0");
"""
PROVIDER_SCRIPT = "KILN_1.0 { local: *; };\nKILN_2.0 { global: kiln_plain; } KILN_1.0;\n"
# What the consumers were linked against: kiln_v@@KILN_3.0 and an unversioned kiln_old.
NEWER = """
__attribute__((visibility("default"))) int kiln_v3(void) { return 5; }
__attribute__((visibility("default"))) int kiln_plain(void) { return 4; }
__attribute__((visibility("default"))) int kiln_old(void) { return 3; }
__asm__(".symver kiln_v3, kiln_v@@KILN_3.0");
"""
NEWER_SCRIPT = "KILN_2.0 { global: kiln_plain; local: *; };\nKILN_3.0 { } KILN_2.0;\n"
# No symbol versions at all: what the unversioned consumer was linked against.
FLAT = """
__attribute__((visibility("default"))) int kiln_old(void) { return 3; }
__attribute__((visibility("default"))) int kiln_plain(void) { return 4; }
"""


def _so(tmp: Path, name: str, source: str, *flags: str, script: str | None = None, soname: str | None = None) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / f"{name}.c").write_text(source)
    extra = [*flags]
    if script is not None:
        (tmp / f"{name}.map").write_text(script)
        extra.append(f"-Wl,--version-script={name}.map")
    if soname is not None:
        extra.append(f"-Wl,-soname,{soname}")
    subprocess.run(["gcc", "-shared", "-o", name, f"{name}.c", *HARDENED, *extra], check=True, capture_output=True,
                   cwd=tmp)
    return tmp / name


def _uses(*calls: str) -> str:
    declared = "".join(f"int {c}(void);\n" for c in calls)
    return declared + '__attribute__((visibility("default"))) int kiln_use(void) { return 0' + "".join(
        f" + {c}()" for c in calls) + "; }\n"


def _audit(wheel: Path, member: str, options: AuditOptions | None = None) -> dict[str, CheckResult]:
    (artifact,) = audit_paths([wheel], options or AuditOptions()).artifacts
    (library,) = [lib for lib in artifact.libraries if lib.path == member]
    return {c.finding or c.id: c for c in library.checks if c.id in ("undefined-symbols", "symbol-versions")}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    tmp = tmp_path_factory.mktemp("symbols")
    newer = _so(tmp / "newer", "libkprov.so", NEWER, script=NEWER_SCRIPT, soname="libkprov.so")
    provider = _so(tmp / "old", "libkprov.so", PROVIDER, script=PROVIDER_SCRIPT, soname="libkprov.so")
    flat = _so(tmp / "flat", "libkprov.so", FLAT, soname="libkprov.so")
    link = [f"-L{newer.parent}", "-l:libkprov.so"]
    return {
        "provider": provider.read_bytes(),
        "newer": newer.read_bytes(),
        "versioned": _so(tmp, "libversioned.so", _uses("kiln_v", "kiln_plain"), *link).read_bytes(),
        "flat": flat.read_bytes(),
        "unversioned": _so(tmp, "libunversioned.so", _uses("kiln_old"), f"-L{flat.parent}",
                           "-l:libkprov.so").read_bytes(),
        "plain": _so(tmp, "libplainuse.so", _uses("kiln_plain"), *link).read_bytes(),
    }


def test_a_versioned_reference_needs_that_version(built: dict[str, bytes], tmp_path: Path) -> None:
    right = make_wheel(tmp_path, {"kilntest/libkprov.so": built["newer"], "kilntest/libuse.so": built["versioned"]})
    main = _audit(right, "kilntest/libuse.so")["undefined-symbols"]
    assert main.ok
    assert main.detail.startswith("2 undefined symbol(s) resolved (2 from libkprov.so); needed: libkprov.so from "
                                  "kilntest/libkprov.so (in the wheel) (")
    # The older library beside it has kiln_v, but not the KILN_3.0 the reference names.
    (old := tmp_path / "old").mkdir()
    wheel = make_wheel(old, {"kilntest/libkprov.so": built["provider"], "kilntest/libuse.so": built["versioned"]})
    main = _audit(wheel, "kilntest/libuse.so")["undefined-symbols"]
    assert not main.ok
    assert main.detail == ("kilntest/libuse.so: 1 undefined symbol(s) no needed library provides: "
                           "kiln_v@KILN_3.0.")
    assert main.fix == FIX


def test_an_unversioned_reference_is_not_bound_to_a_hidden_version(built: dict[str, bytes], tmp_path: Path) -> None:
    right = make_wheel(tmp_path, {"kilntest/libkprov.so": built["flat"], "kilntest/libuse.so": built["unversioned"]})
    assert _audit(right, "kilntest/libuse.so")["undefined-symbols"].ok
    (old := tmp_path / "old").mkdir()
    wheel = make_wheel(old, {"kilntest/libkprov.so": built["provider"], "kilntest/libuse.so": built["unversioned"]})
    main = _audit(wheel, "kilntest/libuse.so")["undefined-symbols"]
    assert main.detail == "kilntest/libuse.so: 1 undefined symbol(s) no needed library provides: kiln_old."


def _flat(count: int) -> str:
    return "".join(f'__attribute__((visibility("default"))) int kiln_m{i}(void) {{ return {i}; }}\n'
                   for i in range(count))


def _undefined_order(lib: bytes, names: list[str]) -> list[str]:
    """The names in the order of the library's dynamic symbol table (the order the check meets them)."""
    from kiln_tool.audit.elf import ElfLibrary

    symbols = [s.name for s in ElfLibrary.from_bytes(lib, "x").dynamic_symbols if not s.defined]
    return sorted(names, key=symbols.index)


@pytest.mark.parametrize("count", [8, 10])
def test_eight_missing_symbols_are_named_and_more_are_counted(tmp_path: Path, count: int) -> None:
    names = [f"kiln_m{i}" for i in range(count)]
    provider = _so(tmp_path / "full", "libkprov.so", _flat(count), soname="libkprov.so")
    user = _so(tmp_path, "libuse.so", _uses(*names), f"-L{provider.parent}", "-l:libkprov.so").read_bytes()
    empty = _so(tmp_path / "empty", "libkprov.so", _flat(0) + "int kiln_nothing;\n", soname="libkprov.so")
    wheel = make_wheel(tmp_path, {"kilntest/libkprov.so": empty.read_bytes(), "kilntest/libuse.so": user})
    main = _audit(wheel, "kilntest/libuse.so")["undefined-symbols"]
    ordered = _undefined_order(user, names)
    more = f" and {count - 8} more" if count > 8 else ""
    assert main.detail == (f"kilntest/libuse.so: {count} undefined symbol(s) no needed library provides: "
                           f"{', '.join(ordered[:8])}{more}.")


def test_a_missing_library_is_named_with_the_symbols_left_to_it(built: dict[str, bytes], tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, {"kilntest/libuse.so": built["versioned"]})
    main = _audit(wheel, "kilntest/libuse.so")["undefined-symbols"]
    ordered = _undefined_order(built["versioned"], ["kiln_v", "kiln_plain"])
    shown = ", ".join(f"{n}@{'KILN_3.0' if n == 'kiln_v' else 'KILN_2.0'}" for n in ordered)
    assert main.detail == ("kilntest/libuse.so: needed libraries not found in the installed layout: libkprov.so (2 "
                           f"undefined symbol(s) that no library found provides are left to them: {shown}).")
    assert main.fix == FIX


def test_the_pass_counts_symbols_per_provider(tmp_path: Path) -> None:
    a = _so(tmp_path / "a", "libka.so", _flat(2), soname="libka.so")
    b = _so(tmp_path / "b", "libkb.so", "".join(f'__attribute__((visibility("default"))) int kiln_b{i}(void) '
                                                 f"{{ return {i}; }}\n" for i in range(3)), soname="libkb.so")
    c = _so(tmp_path / "c", "libkc.so", '__attribute__((visibility("default"))) int kiln_c0(void) { return 0; }\n',
            soname="libkc.so")
    user = _so(tmp_path, "libuse.so", _uses("kiln_m0", "kiln_m1", "kiln_b0", "kiln_b1", "kiln_b2", "kiln_c0"),
               f"-L{a.parent}", f"-L{b.parent}", f"-L{c.parent}", "-l:libkc.so", "-l:libka.so", "-l:libkb.so",
               "-nostdlib").read_bytes()
    wheel = make_wheel(tmp_path, {"kilntest/libka.so": a.read_bytes(), "kilntest/libkb.so": b.read_bytes(),
                                  "kilntest/libkc.so": c.read_bytes(), "kilntest/libuse.so": user})
    main = _audit(wheel, "kilntest/libuse.so")["undefined-symbols"]
    assert main.ok
    # Most first, then by name.
    assert main.detail.startswith("6 undefined symbol(s) resolved (3 from libkb.so, 2 from libka.so, 1 from libkc.so); "
                                  "needed: ")
    needed = main.detail.split("; needed: ", 1)[1]
    assert needed.split("; ") == [f"{n} from kilntest/{n} (in the wheel) (RUNPATH $ORIGIN)"
                                  for n in ("libkc.so", "libka.so", "libkb.so")]


def test_a_library_that_needs_nothing_says_so(tmp_path: Path) -> None:
    lib = _so(tmp_path, "libalone.so", "int kiln_alone;\n", "-nostdlib")
    (artifact,) = audit_paths([lib]).artifacts
    (library,) = artifact.libraries
    (main,) = [c for c in library.checks if c.id == "undefined-symbols"]
    assert main.detail == "no undefined symbols to resolve; needed: none"


PRELOAD_FIX = ("add an $ORIGIN-relative RUNPATH to the directory of the needed library (CMake INSTALL_RPATH, patchelf "
               "--set-rpath), so it loads in any order.")


def test_a_library_found_only_after_the_package_loads_it_is_a_preload_warning(built: dict[str, bytes],
                                                                              tmp_path: Path) -> None:
    # libkprov.so sits in kilntest/sub/, where no RUNPATH of libuse.so looks.
    wheel = make_wheel(tmp_path, {"kilntest/sub/libkprov.so": built["newer"], "kilntest/libuse.so": built["versioned"]})
    results = _audit(wheel, "kilntest/libuse.so")
    preload = results["preload"]
    assert preload.is_warning
    assert preload.detail.startswith("kilntest/libuse.so needs libkprov.so (kilntest/sub/libkprov.so (in the wheel); ")
    assert preload.detail.endswith("): no RUNPATH/RPATH of it reaches the library, so ld.so finds it only if the "
                                   "package has loaded it before (import order, ctypes.CDLL or torch.ops.load_library "
                                   "of it first); loading this library on its own fails.")
    assert preload.fix == PRELOAD_FIX
    assert results["undefined-symbols"].ok  # its symbols are checked against the library it will find


TORCH_USER = """
namespace c10 { int kiln_absent(); }
extern "C" __attribute__((visibility("default"))) int kiln_use() { return c10::kiln_absent(); }
"""
TARGET_FIX = ("audit where that torch is installed (--torch-lib DIR), or record it: `scripts/kiln torch-abi <torch "
              "wheel>` (pip download --no-deps torch==X) and commit data/torch_abi/.")


@pytest.fixture(scope="module")
def torch_user(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A library that needs libc10.so and libtorch.so (stand-ins linked here), and c10::kiln_absent() from them,
    which no real torch has."""
    if shutil.which("g++") is None:
        pytest.skip("g++ is needed")
    tmp = tmp_path_factory.mktemp("torchuser")
    (tmp / "c10.cpp").write_text('namespace c10 { __attribute__((visibility("default"))) int kiln_absent() '
                                 "{ return 0; } }\n")
    (tmp / "torch.cpp").write_text('namespace at { __attribute__((visibility("default"))) int kiln_at() '
                                   "{ return 0; } }\n")
    for name in ("c10", "torch"):
        subprocess.run(["g++", "-shared", "-fPIC", "-o", f"lib{name}.so", f"{name}.cpp"], check=True,
                       capture_output=True, cwd=tmp)
    (tmp / "user.cpp").write_text(TORCH_USER)
    subprocess.run(["g++", "-shared", "-o", "libuse.so", "user.cpp", *HARDENED, f"-L{tmp}", "-Wl,--no-as-needed",
                    "-lc10", "-ltorch"], check=True, capture_output=True, cwd=tmp)
    return (tmp / "libuse.so").read_bytes()


def test_a_torch_symbol_missing_from_the_target_torch_names_that_torch(torch_user: bytes, tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, {"kilntest/libuse.so": torch_user})
    options = AuditOptions(torch_version="2.14.1+cu130")
    (artifact,) = audit_paths([wheel], options).artifacts
    torch = artifact.target["torch"]
    assert torch.startswith("2.14.1+cu130 ")  # installed here (a venv of the matrix) or recorded
    main = _audit(wheel, "kilntest/libuse.so", options)["undefined-symbols"]
    assert main.detail == ("kilntest/libuse.so: 1 undefined symbol(s) no needed library provides: "
                           f"_ZN3c1011kiln_absentEv. Target torch: {torch}.")


def test_without_the_target_torch_its_symbols_are_not_checked_and_said_so(torch_user: bytes, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from kiln_tool.audit import target as target_module

    monkeypatch.setattr(target_module, "candidate_lib_dirs", lambda: [])
    wheel = make_wheel(tmp_path, {"kilntest/libuse.so": torch_user}, requires=("torch==9.8.0",))
    (artifact,) = audit_paths([wheel]).artifacts
    problem = artifact.target["torch"].removeprefix("not found: ")
    assert problem != artifact.target["torch"]
    results = _audit(wheel, "kilntest/libuse.so")
    unknown = results["target-unknown"]
    assert unknown.is_error
    assert unknown.detail == ("kilntest/libuse.so needs libc10.so, libtorch.so of the target torch, which is "
                              f"neither installed here nor recorded: {problem}. Its torch symbols, symbol versions and "
                              "C++ ABI were not checked.")
    assert unknown.fix == TARGET_FIX
    # Never both an ERROR and ok for one check of one library: the pass text ("non-torch libraries resolved") goes.
    assert "undefined-symbols" not in results


def test_without_the_target_torch_other_missing_libraries_are_still_named(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from kiln_tool.audit import target as target_module

    if shutil.which("g++") is None:
        pytest.skip("g++ is needed")
    monkeypatch.setattr(target_module, "candidate_lib_dirs", lambda: [])
    for name in ("c10", "kgone"):
        (tmp_path / f"{name}.c").write_text(f'__attribute__((visibility("default"))) int {name}_f(void) '
                                            "{ return 0; }\n")
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", f"lib{name}.so", f"{name}.c"], check=True,
                       capture_output=True, cwd=tmp_path)
    user = _so(tmp_path, "libuse.so", _uses("c10_f", "kgone_f"), f"-L{tmp_path}", "-lc10", "-lkgone")
    (out := tmp_path / "out").mkdir()
    wheel = make_wheel(out, {"kilntest/libuse.so": user.read_bytes()}, requires=("torch==9.8.0",))
    results = _audit(wheel, "kilntest/libuse.so")
    assert "target-unknown" in results
    main = results["undefined-symbols"]
    assert main.detail == "kilntest/libuse.so: needed libraries not found in the installed layout: libkgone.so."
    assert main.fix == "link every library whose symbols you use with $ORIGIN-relative RUNPATHs."


def test_version_needs_of_a_library_not_needed(corpus: Any) -> None:
    corpus_lib = corpus["libneedsver.so"]
    (artifact,) = audit_paths([corpus_lib]).artifacts
    (library,) = artifact.libraries
    (main,) = [c for c in library.checks if c.id == "undefined-symbols"]
    assert main.detail == (f"{corpus_lib}: version needs name libraries missing from DT_NEEDED: libdepv.so; 1 "
                           "undefined symbol(s) no needed library provides: kiln_dep@KILN_1.0.")


def test_symbol_versions_above_the_policy_name_each_version_and_its_users(tmp_path: Path) -> None:
    # pthread_create@GLIBC_2.34 and pthread_join@GLIBC_2.34 (this glibc's), against manylinux_2_28's ceiling.
    lib = _so(tmp_path, "libnew.so", "#include <pthread.h>\n"
              "static void *run(void *a) { return a; }\n"
              '__attribute__((visibility("default"))) int kiln_go(void) { pthread_t t; '
              "pthread_create(&t, 0, run, 0); return pthread_join(t, 0); }\n", "-pthread")
    (artifact,) = audit_paths([lib], AuditOptions(policy="manylinux_2_28")).artifacts
    (library,) = artifact.libraries
    (check,) = [c for c in library.checks if c.id == "symbol-versions"]
    assert not check.ok
    assert check.detail == (f"{lib} needs symbol versions newer than manylinux_2_28 allows "
                            f"({_reason(artifact.target)}): GLIBC_2.34 from libc.so.6 (newest allowed GLIBC_2.28; used "
                            "by pthread_create, pthread_join).")
    assert check.fix == ("build in a manylinux_2_28 image (e.g. quay.io/pypa/manylinux_2_28_x86_64) with its own "
                         "compiler, so the binary only needs what that glibc/libstdc++ provides; or tag the wheel for "
                         "the newer platform with `kiln repair WHEEL -w DIR` (auditwheel repair with torch's libraries "
                         "excluded and torch's floor kept; `kiln wheels` runs it).")
    (artifact,) = audit_paths([lib], AuditOptions(policy="manylinux_2_34")).artifacts
    (check,) = [c for c in artifact.libraries[0].checks if c.id == "symbol-versions"]
    assert check.ok and check.detail == f"within manylinux_2_34 ({_reason(artifact.target)})"


def _reason(target: dict[str, str]) -> str:
    """Why the audit took its policy, from the report's target ("manylinux_2_28 (REASON)")."""
    return target["policy"].split(" (", 1)[1].removesuffix(")")


def _linkable(folder: Path, provider: bytes) -> None:
    """The provider as libkprov.so in a folder to link against (-L)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "libkprov.so").write_bytes(provider)


def _one_function(tmp: Path, soname: str, function: str) -> Path:
    """A library of its own folder that exports one function, int FUNCTION(void)."""
    return _so(tmp / soname.removesuffix(".so"), soname, f'__attribute__((visibility("default"))) int {function}(void) '
               "{ return 0; }\n", soname=soname)


def _user_of(tmp: Path, built: dict[str, bytes], calls: tuple[str, ...], *first: Path) -> Path:
    """libuse.so calling these functions; NEEDED: each library of `first`, then libkprov.so (the flat one)."""
    _linkable(tmp / "flat", built["flat"])
    return _so(tmp, "libuse.so", _uses(*calls), *(f"-L{lib.parent}" for lib in first), f"-L{tmp / 'flat'}",
               "-Wl,--no-as-needed", *(f"-l:{lib.name}" for lib in first), "-l:libkprov.so")


def test_each_needed_library_is_looked_for_after_a_missing_one(built: dict[str, bytes], tmp_path: Path) -> None:
    # NEEDED: libkgone.so first, then libkprov.so (flat, beside it in the wheel).
    user = _user_of(tmp_path, built, ("kgone_f", "kiln_plain"), _one_function(tmp_path, "libkgone.so", "kgone_f"))
    from kiln_tool.audit.elf import ElfLibrary

    assert ElfLibrary.open(user).needed[:2] == ["libkgone.so", "libkprov.so"]
    wheel = make_wheel(tmp_path, {"kilntest/libkprov.so": built["flat"], "kilntest/libuse.so": user.read_bytes()})
    main = _audit(wheel, "kilntest/libuse.so")["undefined-symbols"]
    assert main.detail == ("kilntest/libuse.so: needed libraries not found in the installed layout: libkgone.so (1 "
                           "undefined symbol(s) that no library found provides are left to them: kgone_f).")


def test_every_library_found_only_by_preload_is_named(built: dict[str, bytes], tmp_path: Path) -> None:
    other = _one_function(tmp_path, "libkoth.so", "koth_f")
    user = _user_of(tmp_path, built, ("koth_f", "kiln_plain"), other)
    wheel = make_wheel(tmp_path, {"kilntest/sub/libkprov.so": built["flat"], "kilntest/sub/libkoth.so":
                                  other.read_bytes(), "kilntest/libuse.so": user.read_bytes()})
    preload = _audit(wheel, "kilntest/libuse.so")["preload"]
    assert preload.detail.startswith("kilntest/libuse.so needs libkoth.so (kilntest/sub/libkoth.so (in the wheel); ")
    assert "), libkprov.so (kilntest/sub/libkprov.so (in the wheel); " in preload.detail


def test_a_symbol_only_a_library_of_a_library_provides_binds_through_the_needed_closure(corpus: Any) -> None:
    # The library's own NEEDED closure always loads with it and ld.so searches all of it: never "it breaks".
    lib = corpus["libunder.so"]
    (artifact,) = audit_paths([lib]).artifacts
    (main,) = [c for c in artifact.libraries[0].checks if c.id == "undefined-symbols"]
    assert main.ok and artifact.ok
    assert "; bound in libraries its NEEDED closure loads (not named in its own DT_NEEDED): 1 from libdep.so" \
        in main.detail


VARIANT_FIX = ("nothing, if the package loads only the variant of the running torch; audit against a torch of this "
               "variant's platform (--torch VERSION) to check it.")


def test_a_variant_for_another_cuda_is_not_checked_against_this_torch_and_said_so(tmp_path: Path) -> None:
    stub = '__attribute__((visibility("default"))) int cudaGetDeviceCount(int *n) { *n = 0; return 0; }\n'
    user = ('int cudaGetDeviceCount(int *);\n__attribute__((visibility("default"))) int kiln_use(void) '
            "{ int n; return cudaGetDeviceCount(&n) + n; }\n")
    files: dict[str, bytes] = {}
    for major in (12, 13):
        runtime = _so(tmp_path / f"rt{major}", f"libcudart.so.{major}", stub, soname=f"libcudart.so.{major}")
        files[f"kilnops/libkilnops_cu{major}.so"] = _so(tmp_path / f"cu{major}", f"libkilnops_cu{major}.so", user,
                                                        f"-L{runtime.parent}", f"-l:libcudart.so.{major}").read_bytes()
    wheel = make_wheel(tmp_path, files)
    options = AuditOptions(torch_version="2.14.1+cu130")
    results = _audit(wheel, "kilnops/libkilnops_cu12.so", options)
    variant = results["variant"]
    assert variant.is_warning
    assert variant.detail.startswith("kilnops/libkilnops_cu12.so is the CUDA 12 variant among 2 per-platform "
                                     "libraries")
    assert variant.detail.endswith("; the target torch 2.14.1+cu130 is CUDA 13, so it is never loaded with it: the "
                                   "libraries it needs that this torch does not provide (libcudart.so.12) and the 1 "
                                   "undefined symbol(s) left to them were not checked.")
    assert variant.fix == VARIANT_FIX
    assert results["undefined-symbols"].ok
    # The variant of this torch's CUDA is checked as any library is.
    thirteen = _audit(wheel, "kilnops/libkilnops_cu13.so", options)
    assert set(thirteen) == {"undefined-symbols", "symbol-versions"}
    assert thirteen["undefined-symbols"].detail.startswith("1 undefined symbol(s) resolved (1 from libcudart.so.13)")


@pytest.mark.parametrize(("node", "resolved"), [("libcudart.so.13", True), ("libcudart.so.99", False)])
def test_a_recorded_library_provides_a_symbol_in_the_version_it_recorded(tmp_path: Path, node: str, resolved: bool,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from kiln_tool.audit import target as target_module

    # torch 2.14.1+cu130 from data/torch_abi only (its runtime's libcudart.so.13 recorded, cudaGetDeviceCount in
    # the version libcudart.so.13), whatever is installed here.
    monkeypatch.setattr(target_module, "candidate_lib_dirs", lambda: [])
    stub = '__attribute__((visibility("default"))) int cudaGetDeviceCount(int *n) { *n = 0; return 0; }\n'
    runtime = _so(tmp_path / "rt", "libcudart.so.13", stub, script=f"{node} {{ global: cudaGetDeviceCount; "
                  "local: *; };\n", soname="libcudart.so.13")
    user = _so(tmp_path, "libuse.so", 'int cudaGetDeviceCount(int *);\n__attribute__((visibility("default"))) int '
               "kiln_use(void) { int n; return cudaGetDeviceCount(&n) + n; }\n", f"-L{runtime.parent}",
               "-l:libcudart.so.13")
    wheel = make_wheel(tmp_path, {"kilntest/libuse.so": user.read_bytes()}, requires=("torch==2.14.1",))
    options = AuditOptions(torch_version="2.14.1+cu130")
    (artifact,) = audit_paths([wheel], options).artifacts
    assert "as recorded in" in artifact.target["torch"]
    main = _audit(wheel, "kilntest/libuse.so", options)["undefined-symbols"]
    if resolved:
        assert main.ok and main.detail.startswith("1 undefined symbol(s) resolved (1 from libcudart.so.13)")
    else:
        assert main.detail == ("kilntest/libuse.so: 1 undefined symbol(s) no needed library provides: "
                               "cudaGetDeviceCount@libcudart.so.99.")


def test_interpreter_symbols_are_passed_over_and_the_rest_still_checked(tmp_path: Path) -> None:
    # An extension module: the Py* symbols are the interpreter's; the kiln_gone* ones are nobody's.
    calls = [f"PyKiln_{i}" for i in range(6)] + [f"kiln_gone{i}" for i in range(6)]
    source = _uses(*calls).replace("kiln_use", "PyInit_kilnx")
    module = _so(tmp_path, "kilnx.cpython-311-x86_64-linux-gnu.so", source)
    (artifact,) = audit_paths([module]).artifacts
    (main,) = [c for c in artifact.libraries[0].checks if c.id == "undefined-symbols"]
    missing = _undefined_order(module.read_bytes(), [c for c in calls if c.startswith("kiln_")])
    assert main.detail == (f"{module}: 6 undefined symbol(s) no needed library provides: {', '.join(missing)}.")


def test_every_stray_version_need_is_named(built: dict[str, bytes], tmp_path: Path) -> None:
    other = _so(tmp_path / "other", "libkoth.so", '__attribute__((visibility("default"))) int koth_f(void) '
                "{ return 0; }\n", script="KOTH_1.0 { global: koth_f; local: *; };\n", soname="libkoth.so")
    _linkable(tmp_path / "newer", built["newer"])
    user = _so(tmp_path, "libuse.so", _uses("kiln_plain", "koth_f"), f"-L{tmp_path / 'newer'}", f"-L{other.parent}",
               "-Wl,--no-as-needed", "-l:libkprov.so", "-l:libkoth.so")
    subprocess.run([_patchelf(), "--remove-needed", "libkprov.so", "--remove-needed", "libkoth.so", str(user)],
                   check=True, capture_output=True)
    (artifact,) = audit_paths([user]).artifacts
    (main,) = [c for c in artifact.libraries[0].checks if c.id == "undefined-symbols"]
    assert main.detail.startswith(f"{user}: version needs name libraries missing from DT_NEEDED: libkoth.so, "
                                  "libkprov.so; ")


def _patchelf() -> str:
    found = patchelf()
    if not Path(found).exists():
        pytest.skip("patchelf is needed")
    return found


def test_a_library_only_an_unknown_library_a_dependency_loads_could_provide_is_unchecked(tmp_path: Path) -> None:
    # libkmid.so (in the wheel) needs the GPU driver; libuse.so needs libkmid.so and uses cuInit, which only the
    # driver (whose exports are never known) could provide.
    driver = _so(tmp_path / "driver", "libcuda.so.1", '__attribute__((visibility("default"))) int cuInit(unsigned f) '
                 "{ return (int)f; }\n", soname="libcuda.so.1")
    mid = _so(tmp_path / "mid", "libkmid.so", '__attribute__((visibility("default"))) int kmid_f(void) { return 0; }\n',
              f"-L{driver.parent}", "-Wl,--no-as-needed", "-l:libcuda.so.1", soname="libkmid.so")
    user = _so(tmp_path, "libuse.so", "int cuInit(unsigned);\nint kmid_f(void);\n"
               '__attribute__((visibility("default"))) int kiln_use(void) { return cuInit(0) + kmid_f(); }\n',
               f"-L{mid.parent}", "-l:libkmid.so", "-Wl,--unresolved-symbols=ignore-all")
    wheel = make_wheel(tmp_path, {"kilntest/libkmid.so": mid.read_bytes(), "kilntest/libuse.so": user.read_bytes()})
    results = _audit(wheel, "kilntest/libuse.so")
    unchecked = results["unchecked"]
    assert unchecked.detail == ("kilntest/libuse.so: 1 undefined symbol(s) not checked: no library whose exports are "
                                "known provides them, and libcuda.so.1 (the user's GPU driver; exports not recorded), "
                                "which a needed library pulls in may: cuInit.")
    assert results["undefined-symbols"].ok
    assert results["undefined-symbols"].detail.startswith("1 undefined symbol(s) resolved (1 from libkmid.so); 1 not "
                                                          "checked; needed: ")


def test_a_math_function_only_a_dependency_links_binds_through_it(tmp_path: Path) -> None:
    # libm.so.6 is not in libuse.so's DT_NEEDED, but libkmid.so (which it needs) loads it: sin binds there.
    mid = _so(tmp_path / "mid", "libkmid.so", '#include <math.h>\n__attribute__((visibility("default"))) double '
              "kmid_f(double x) { return cos(x); }\n", "-Wl,--no-as-needed", "-lm", soname="libkmid.so")
    user = _so(tmp_path, "libuse.so", "double sin(double);\ndouble kmid_f(double);\n"
               '__attribute__((visibility("default"))) double kiln_use(double x) { return sin(x) + kmid_f(x); }\n',
               f"-L{mid.parent}", "-l:libkmid.so", "-fno-builtin", "-Wl,--unresolved-symbols=ignore-all")
    wheel = make_wheel(tmp_path, {"kilntest/libkmid.so": mid.read_bytes(), "kilntest/libuse.so": user.read_bytes()})
    main = _audit(wheel, "kilntest/libuse.so")["undefined-symbols"]
    assert main.ok, main.detail
    assert "bound in libraries its NEEDED closure loads (not named in its own DT_NEEDED): 1 from libm.so.6" \
        in main.detail


def test_a_symbol_glibc_moved_into_libc_resolves_there(tmp_path: Path) -> None:
    # Built against glibc < 2.34, pthread_create came from libpthread.so.0; since 2.34 libpthread.so.0 is empty and
    # ld.so binds it in libc.so.6, which libpthread.so.0 pulls in. (Here: a library of this glibc whose NEEDED and
    # version needs patchelf renamed from libc.so.6 to libpthread.so.0.)
    lib = _so(tmp_path, "libold.so", "#include <pthread.h>\nstatic void *run(void *a) { return a; }\n"
              '__attribute__((visibility("default"))) int kiln_go(void) { pthread_t t; pthread_create(&t, 0, run, 0); '
              "return pthread_join(t, 0); }\n", "-pthread")
    subprocess.run([_patchelf(), "--replace-needed", "libc.so.6", "libpthread.so.0", str(lib)], check=True,
                   capture_output=True)
    from kiln_tool.audit.elf import ElfLibrary

    opened = ElfLibrary.open(lib)
    assert opened.needed == ["libpthread.so.0"] and set(opened.version_needs) == {"libpthread.so.0"}
    (artifact,) = audit_paths([lib]).artifacts
    (main,) = [c for c in artifact.libraries[0].checks if c.id == "undefined-symbols"]
    assert main.ok
    assert main.detail.startswith("2 undefined symbol(s) resolved (2 from libc.so.6); needed: libpthread.so.0 from ")


def test_a_versioned_symbol_of_an_unknown_library_is_unchecked_and_names_it(tmp_path: Path) -> None:
    # The GPU driver, needed directly, with its symbols versioned: what only it provides is not checked, and said
    # to be its.
    driver = _so(tmp_path / "driver", "libcuda.so.1", '__attribute__((visibility("default"))) int cuInit(unsigned f) '
                 "{ return (int)f; }\n", script="libcuda.so.1 { global: cuInit; local: *; };\n",
                 soname="libcuda.so.1")
    user = _so(tmp_path, "libuse.so", 'int cuInit(unsigned);\n__attribute__((visibility("default"))) int '
               "kiln_use(void) { return cuInit(0); }\n", f"-L{driver.parent}", "-l:libcuda.so.1")
    wheel = make_wheel(tmp_path, {"kilntest/libuse.so": user.read_bytes()})
    results = _audit(wheel, "kilntest/libuse.so")
    assert results["unchecked"].detail == (
        "kilntest/libuse.so: 1 undefined symbol(s) not checked: no library whose exports are known provides them, and "
        "libcuda.so.1 (the user's GPU driver; exports not recorded) may: cuInit@libcuda.so.1 (from libcuda.so.1).")
    assert results["undefined-symbols"].ok


def test_a_missing_library_nothing_is_left_to_is_named_alone_and_first(built: dict[str, bytes], tmp_path: Path) -> None:
    gone = _one_function(tmp_path, "libkgone.so", "kgone_unused")
    # NEEDED libkgone.so (nothing used from it) and libkprov.so (flat, beside it).
    user = _user_of(tmp_path, built, ("kiln_plain",), gone)
    wheel = make_wheel(tmp_path, {"kilntest/libkprov.so": built["flat"], "kilntest/libuse.so": user.read_bytes()})
    main = _audit(wheel, "kilntest/libuse.so")["undefined-symbols"]
    assert main.detail == "kilntest/libuse.so: needed libraries not found in the installed layout: libkgone.so."
    # Beside a version need of a library not needed, the missing library comes first.
    other = _so(tmp_path / "other", "libkoth.so", '__attribute__((visibility("default"))) int koth_f(void) '
                "{ return 0; }\n", script="KOTH_1.0 { global: koth_f; local: *; };\n", soname="libkoth.so")
    stray = _so(tmp_path / "stray", "libuse.so", _uses("kiln_plain", "koth_f"), f"-L{gone.parent}",
                f"-L{tmp_path / 'flat'}", f"-L{other.parent}", "-Wl,--no-as-needed", "-l:libkgone.so",
                "-l:libkprov.so", "-l:libkoth.so")
    subprocess.run([_patchelf(), "--remove-needed", "libkoth.so", str(stray)], check=True, capture_output=True)
    (out := tmp_path / "out").mkdir()
    wheel = make_wheel(out, {"kilntest/libkprov.so": built["flat"], "kilntest/libuse.so": stray.read_bytes()})
    main = _audit(wheel, "kilntest/libuse.so")["undefined-symbols"]
    assert main.detail.startswith("kilntest/libuse.so: needed libraries not found in the installed layout: libkgone.so"
                                  "; version needs name libraries missing from DT_NEEDED: libkoth.so; ")


def test_providers_with_as_many_symbols_are_listed_by_name(tmp_path: Path) -> None:
    names = ["libkd.so", "libkb.so", "libkc.so", "libka.so"]
    links = []
    for i, name in enumerate(names):
        _so(tmp_path / name, name, f'__attribute__((visibility("default"))) int kiln_p{i}(void) {{ return {i}; }}\n',
            soname=name)
        links += [f"-L{tmp_path / name}", f"-l:{name}"]
    user = _so(tmp_path, "libuse.so", _uses(*(f"kiln_p{i}" for i in range(4))), "-Wl,--no-as-needed", *links,
               "-nostdlib")
    wheel = make_wheel(tmp_path, {**{f"kilntest/{n}": (tmp_path / n / n).read_bytes() for n in names},
                                  "kilntest/libuse.so": user.read_bytes()})
    main = _audit(wheel, "kilntest/libuse.so")["undefined-symbols"]
    assert main.detail.startswith("4 undefined symbol(s) resolved (1 from libka.so, 1 from libkb.so, 1 from libkc.so, "
                                  "1 from libkd.so); needed: ")


def test_a_versioned_symbol_is_judged_by_its_name_alone(built: dict[str, bytes], tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # With kiln_v named a torch symbol (exactly, no wildcard), kiln_v@KILN_3.0 missing is torch's problem: the
    # hint names the target torch.
    from dataclasses import replace

    from kiln_tool.audit import policy as audit_policy

    for name in audit_policy.available_policies():
        policy = audit_policy.load_policy(name)
        monkeypatch.setitem(audit_policy._CACHE, name, replace(policy, torch_symbols=(*policy.torch_symbols,
                                                                                       "kiln_v")))
    wheel = make_wheel(tmp_path, {"kilntest/libkprov.so": built["provider"], "kilntest/libuse.so": built["versioned"]})
    main = _audit(wheel, "kilntest/libuse.so", AuditOptions(torch_version="2.14.1+cu130"))["undefined-symbols"]
    assert main.detail.startswith("kilntest/libuse.so: 1 undefined symbol(s) no needed library provides: "
                                  "kiln_v@KILN_3.0. Target torch: 2.14.1+cu130 ")


MIXED_NODES = ["kiln1", "CXXABI_TM_1", "GLIBC_2.99", "CXXABI_FLOAT128", "kiln2", "kiln3", "kiln4", "kiln5"]
MIXED = "".join(f'__attribute__((visibility("default"))) int kiln_x{i}(void) {{ return {i}; }}\n'
                f'__asm__(".symver kiln_x{i}, kiln_y{i}@@{node}");\n'
                for i, node in enumerate(MIXED_NODES))
MIXED_SCRIPT = "kiln0 { local: *; };\n" + "".join(f"{node} {{ }};\n" for node in MIXED_NODES)


def test_versions_outside_the_policy_or_allowed_by_it_are_passed_over_and_the_rest_checked(tmp_path: Path) -> None:
    mixed = _so(tmp_path / "mixed", "libkmix.so", MIXED, script=MIXED_SCRIPT, soname="libkmix.so")
    user = _so(tmp_path, "libuse.so", "#include <pthread.h>\nstatic void *run(void *a) { return a; }\n" +
               "".join(f"int kiln_y{i}(void);\n" for i in range(len(MIXED_NODES))) +
               '__attribute__((visibility("default"))) int kiln_use(void) { pthread_t t; pthread_create(&t, 0, run, 0);'
               " return pthread_join(t, 0)" + "".join(f" + kiln_y{i}()" for i in range(len(MIXED_NODES))) + "; }\n",
               "-pthread", f"-L{mixed.parent}", "-l:libkmix.so")
    from kiln_tool.audit.elf import ElfLibrary

    needs = ElfLibrary.open(user).version_needs["libkmix.so"]
    # The linker writes them in its own (hash) order: with this many, a version of no policy namespace and one the
    # policy allows come before GLIBC_2.99 (checked, so the test says when that stops holding).
    at = needs.index("GLIBC_2.99")
    assert {"kiln1", "kiln2", "kiln3", "kiln4", "kiln5"} & set(needs[:at])
    assert {"CXXABI_TM_1", "CXXABI_FLOAT128"} & set(needs[:at])
    (artifact,) = audit_paths([user], AuditOptions(policy="manylinux_2_28")).artifacts
    (check,) = [c for c in artifact.libraries[0].checks if c.id == "symbol-versions"]
    assert check.detail == (f"{user} needs symbol versions newer than manylinux_2_28 allows "
                            f"({_reason(artifact.target)}): GLIBC_2.34 from libc.so.6 (newest allowed GLIBC_2.28; used "
                            "by pthread_create, pthread_join); GLIBC_2.99 from libkmix.so (newest allowed GLIBC_2.28; "
                            "used by kiln_y2).")


def test_a_namespace_the_policy_allows_no_version_of_says_none(built: dict[str, bytes], tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    from kiln_tool.audit import policy as audit_policy

    policy = audit_policy.load_policy("manylinux_2_28")
    versions = {arch: {**table, "KILN": audit_policy.VersionCeiling(None, frozenset())}
                for arch, table in policy.symbol_versions.items()}
    monkeypatch.setitem(audit_policy._CACHE, "manylinux_2_28", replace(policy, symbol_versions=versions))
    wheel = make_wheel(tmp_path, {"kilntest/libkprov.so": built["newer"], "kilntest/libuse.so": built["plain"]})
    (artifact,) = audit_paths([wheel], AuditOptions(policy="manylinux_2_28")).artifacts
    (library,) = [lib for lib in artifact.libraries if lib.path == "kilntest/libuse.so"]
    (check,) = [c for c in library.checks if c.id == "symbol-versions"]
    assert check.detail == ("kilntest/libuse.so needs symbol versions newer than manylinux_2_28 allows "
                            f"({_reason(artifact.target)}): KILN_2.0 from libkprov.so (newest allowed KILN_none; used "
                            "by kiln_plain).")


def test_libraries_a_declared_dependency_ships_are_named_and_the_rest_still_missing(tmp_path: Path) -> None:
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    c10 = _one_function(tmp_path, "libc10.so", "c10_unused")
    lib_dir = installed_torch(site, "9.3.0+cpu", {"libc10.so": c10.read_bytes()})
    shipped = [_one_function(tmp_path, f"libkdep{x}.so", f"kdep{x}_f") for x in "ab"]
    installed_project(site, "kilndep", "1.0", {f"kilndep/lib/{lib.name}": lib.read_bytes() for lib in shipped})
    gone = _one_function(tmp_path, "libkgone.so", "kgone_f")
    user = _so(tmp_path, "libuse.so", _uses("kdepa_f", "kdepb_f", "kgone_f"), *(f"-L{lib.parent}" for lib in
               [*shipped, gone]), "-Wl,--no-as-needed", "-l:libkdepa.so", "-l:libkdepb.so", "-l:libkgone.so")
    wheel = make_wheel(tmp_path, {"kilntest/libuse.so": user.read_bytes()}, requires=("kilndep>=1",))
    results = _audit(wheel, "kilntest/libuse.so", AuditOptions(torch_lib=lib_dir))
    assert results["dependency"].detail == (
        "kilntest/libuse.so needs libkdepa.so, which the declared dependency kilndep 1.0 (Requires-Dist: kilndep>=1) "
        "ships; libkdepb.so, which the declared dependency kilndep 1.0 (Requires-Dist: kilndep>=1) ships: no RUNPATH "
        "of it reaches that library, so it loads only after the package has loaded it (ctypes preload, import "
        "order); its symbols were not checked.")
    # The unversioned symbols could be any missing library's: all are left to the one still missing.
    left = ", ".join(_undefined_order(user.read_bytes(), ["kdepa_f", "kdepb_f", "kgone_f"]))
    assert results["undefined-symbols"].detail == (
        "kilntest/libuse.so: needed libraries not found in the installed layout: libkgone.so (3 undefined symbol(s) "
        f"that no library found provides are left to them: {left}).")
