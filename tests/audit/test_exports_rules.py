"""The exports check rule by rule (audit/checks/exports.py), on libraries built from tiny C sources: which
names of a library loaded by name are its C API and which leaked (mangled C++, reserved identifiers), what
the policy's allowlist lets a grafted library export, and the words a maintainer reads (the sample of names,
the counts, the fix)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from audit_corpus import HARDENED, SOURCES, make_wheel

from kiln_tool.audit import CheckResult, audit_paths

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is needed")

LOADER = b"""
import ctypes, pathlib
LIB = ctypes.CDLL(str(pathlib.Path(__file__).parent / "libkilnapi.so"))
"""


def _exporting(tmp: Path, name: str, symbols: list[str]) -> bytes:
    """A library whose dynamic symbol table exports exactly these names (asm labels give any name)."""
    lines = [f'__attribute__((visibility("default"))) int kiln_fn{i}(void) __asm__("{symbol}");\n'
             f"int kiln_fn{i}(void) {{ return {i}; }}" for i, symbol in enumerate(symbols)]
    src = tmp / f"{name}.c"
    src.write_text("\n".join(lines) + "\n")
    subprocess.run(["gcc", "-shared", "-o", name, src.name, *HARDENED], check=True, capture_output=True, cwd=tmp)
    return (tmp / name).read_bytes()


def _exports(wheel: Path, member: str) -> CheckResult:
    (artifact,) = audit_paths([wheel]).artifacts
    (lib,) = [lib for lib in artifact.libraries if lib.path == member]
    (check,) = [c for c in lib.checks if c.id == "exports"]
    return check


def test_a_library_loaded_by_name_keeps_its_c_api_and_is_failed_for_what_leaked(tmp_path: Path) -> None:
    c_api = ["_", "_lower", "kApi", "kiln_api"]
    leaked = ["_U", "_Upper", "_Z8cxx_likei", "__dunder"]
    library = _exporting(tmp_path, "libkilnapi.so", c_api + leaked)
    files = {"kilnapi/loader.py": LOADER, "kilnapi/libkilnapi.so": library}
    check = _exports(make_wheel(tmp_path, files), "kilnapi/libkilnapi.so")
    assert not check.ok
    assert check.detail == (
        "library kilnapi/libkilnapi.so, loaded by name by kilnapi/loader.py (ctypes/dlopen): its C API of 4 "
        "symbol(s) (_, _lower, kApi, kiln_api) is what the loader calls; it also exports 4 C++ or "
        "compiler-internal symbol(s) that leaked: _U, _Upper, _Z8cxx_likei, __dunder. Exported symbols collide "
        "with other libraries loaded into the process.")


def test_a_library_loaded_by_name_with_only_its_c_api_passes(tmp_path: Path) -> None:
    files = {"kilnapi/loader.py": LOADER, "kilnapi/libkilnapi.so": _exporting(tmp_path, "libkilnapi.so", ["kiln_a"])}
    check = _exports(make_wheel(tmp_path, files), "kilnapi/libkilnapi.so")
    assert check.ok
    assert check.detail == "loaded by name by kilnapi/loader.py: its C API of 1 symbol(s) (kiln_a) is what the " \
                           "loader calls"


def test_a_library_loaded_by_name_that_exports_only_internals_has_no_c_api(tmp_path: Path) -> None:
    files = {"kilnapi/loader.py": LOADER, "kilnapi/libkilnapi.so": _exporting(tmp_path, "libkilnapi.so", ["_Zx"])}
    check = _exports(make_wheel(tmp_path, files), "kilnapi/libkilnapi.so")
    assert not check.ok and "(ctypes/dlopen): it exports no C API; it also exports 1 C++" in check.detail


@pytest.mark.parametrize(("count", "sample"), [
    (6, "k0, k1, k2, k3, k4, k5."),
    (7, "k0, k1, k2, k3, k4, k5 and 1 more."),
    (9, "k0, k1, k2, k3, k4, k5 and 3 more."),
])
def test_a_library_names_six_of_its_exports_and_counts_the_rest(tmp_path: Path, count: int, sample: str) -> None:
    files = {"kilnlib/libplain.so": _exporting(tmp_path, "libplain.so", [f"k{i}" for i in range(count)])}
    check = _exports(make_wheel(tmp_path, files), "kilnlib/libplain.so")
    assert not check.ok
    assert check.detail.startswith(f"library kilnlib/libplain.so exports {count} symbol(s) no allowlist covers: "
                                   f"{sample} Exported symbols collide")


def test_a_grafted_library_keeps_its_public_api(tmp_path: Path) -> None:
    """auditwheel's grafted copies (PKG.libs/) are third-party libraries: the policy allows every export."""
    files = {"kilnlib.libs/libthird-1a2b3c4d.so.1": _exporting(tmp_path, "libthird.so", ["third_a", "third_b"])}
    check = _exports(make_wheel(tmp_path, files), "kilnlib.libs/libthird-1a2b3c4d.so.1")
    assert check.ok and check.detail == "2 exported symbol(s), all allowed"


def test_an_extension_module_without_its_init_and_with_extras_is_told_both_and_the_fix(tmp_path: Path) -> None:
    member = "kilnext/_C.cpython-311-x86_64-linux-gnu.so"
    files = {member: _exporting(tmp_path, "_C.so", ["kiln_helper"])}
    check = _exports(make_wheel(tmp_path, files), member)
    assert not check.ok
    assert check.detail == (
        f"extension module {member} does not export PyInit__C (and registers no torch operators, so it is no "
        "torch.ops.load_library op library either), so `import` fails; exports 1 symbol(s) besides PyInit__C: "
        "kiln_helper.")
    assert check.fix == (
        "build with -fvisibility=hidden -fvisibility-inlines-hidden, declare the init with PyMODINIT_FUNC, and "
        "link with a version script exporting only PyInit__C (global: PyInit_...; local: *;) plus "
        "-Wl,--exclude-libs,ALL.")


LOADED_FIX = ("keep the extern \"C\" API and hide the rest: -fvisibility=hidden with the API marked "
              "__attribute__((visibility(\"default\"))), or a version script listing only it; -Wl,--exclude-libs,ALL "
              "for static dependencies.")
LIBRARY_FIX = ("hide them (-fvisibility=hidden, a version script, -Wl,--exclude-libs,ALL), or list the library's "
               "public API in the policy's \"exports\" (data/audit_policy/common.json).")


def test_each_kind_of_library_is_told_its_own_fix(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    files = {"kilnapi/loader.py": LOADER, "kilnapi/libkilnapi.so": _exporting(tmp_path / "a", "libkilnapi.so", ["_Zx"]),
             "kilnlib/libplain.so": _exporting(tmp_path, "libplain.so", ["k0"])}
    wheel = make_wheel(tmp_path, files)
    assert _exports(wheel, "kilnapi/libkilnapi.so").fix == LOADED_FIX
    assert _exports(wheel, "kilnlib/libplain.so").fix == LIBRARY_FIX


# The corpus's TORCH_LIBRARY expansion (audit_corpus.SOURCES), and a C function it exports by mistake.
OP_LIBRARY = SOURCES["register.cpp"] + \
    'extern "C" __attribute__((visibility("default"))) int kiln_leak(int x) { return x; }\n'


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is needed")
def test_an_op_library_is_named_one_when_it_exports_too_much(tmp_path: Path) -> None:
    """A library that registers torch operators at load time (torch.ops.load_library), even under an
    extension module's name, is judged by the allowlist, not told to export PyInit_."""
    (tmp_path / "ops.cpp").write_text(OP_LIBRARY)
    subprocess.run(["g++", "-shared", "-o", "libops.so", "ops.cpp", *HARDENED], check=True, capture_output=True,
                   cwd=tmp_path)
    member = "kilnops/_ops.cpython-311-x86_64-linux-gnu.so"
    check = _exports(make_wheel(tmp_path, {member: (tmp_path / "libops.so").read_bytes()}), member)
    assert not check.ok
    assert check.detail == (f"op library (torch.ops.load_library) {member} exports 1 symbol(s) no allowlist covers: "
                            "kiln_leak. Exported symbols collide with other libraries loaded into the process.")
    assert check.fix == LIBRARY_FIX


@pytest.mark.parametrize("kind", [3, 4])  # STT_SECTION, STT_FILE
def test_a_global_section_or_file_symbol_is_no_export(tmp_path: Path, kind: int) -> None:
    """gABI makes them local; one a hand-made ELF declares global is still skipped by ld.so's lookup."""
    from elftools.elf.elffile import ELFFile

    lib = tmp_path / "libodd.so"
    lib.write_bytes(_exporting(tmp_path, "libodd.so", ["k_kept", "k_odd"]))
    with lib.open("rb") as fh:
        dynsym = ELFFile(fh).get_section_by_name(".dynsym")
        (index,) = [i for i, s in enumerate(dynsym.iter_symbols()) if s.name == "k_odd"]
        at = dynsym["sh_offset"] + index * dynsym["sh_entsize"] + 4  # Elf64_Sym.st_info
    data = bytearray(lib.read_bytes())
    data[at] = (data[at] & 0xF0) | kind
    lib.write_bytes(bytes(data))
    check = _exports(make_wheel(tmp_path, {"kilnlib/libodd.so": lib.read_bytes()}), "kilnlib/libodd.so")
    assert check.detail.startswith("library kilnlib/libodd.so exports 1 symbol(s) no allowlist covers: k_kept."), \
        check.detail
