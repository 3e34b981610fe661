"""build-paths (audit/checks/build_paths.py) rule by rule, on libraries built from tiny C sources with the real
compiler: which bytes are searched (everything but machine code, window by window, a path across a window's
edge seen once and whole), where each path is said to be, what DWARF adds and when it is not read, the three
kinds of finding (the project's tree, the toolchain's headers, a vendored library's builder) and the words a
maintainer reads."""

from __future__ import annotations

import shutil
import struct
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from audit_corpus import HARDENED, NVCC, make_wheel
from elftools.elf.elffile import ELFFile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiln_tool.audit import CheckResult, audit_paths
from kiln_tool.audit import elf as audit_elf
from kiln_tool.audit import policy as audit_policy
from kiln_tool.audit.checks.build_paths import dwarf_bytes

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is needed")

FIX = ("map paths out at compile time (-ffile-prefix-map=<src>=<name>, for nvcc via -Xcompiler), build without "
       "-g/-lineinfo for release or strip debug info, and avoid __FILE__ in messages.")
TOOLCHAIN_FIX = ("-ffile-prefix-map for the toolchain and dependency include directories too (e.g. "
                 "-ffile-prefix-map=$(python -c 'import torch,os;print(os.path.dirname(torch.__file__))')=torch).")
VENDORED_FIX = ("nothing in this project's build: it comes with the vendored library (rebuild it with "
                "-ffile-prefix-map, or take a stripped build).")
SOURCE = "/tmp/kilnbuild/ops/kernel.cpp"
HEADER = "/usr/include/c++/12/bits/basic_string.h"
PREBUILT = "/builddir/build/BUILD/gcc-12.2.1-20221121/libstdc++-v3/src/c++11/string-inst.cc"


def _strings(*paths: str) -> str:
    """C that keeps each path in .rodata (exported, so nothing folds it away)."""
    return "".join(f'__attribute__((visibility("default"))) const char kiln_s{i}[] = "{p}";\n'
                   for i, p in enumerate(paths))


def _build(tmp: Path, name: str, source: str, *flags: str) -> Path:
    (tmp / f"{name}.c").write_text(source)
    subprocess.run(["gcc", "-shared", "-o", name, f"{name}.c", *HARDENED, *flags], check=True, capture_output=True,
                   cwd=tmp)
    return tmp / name


def _results(path: Path) -> list[CheckResult]:
    (artifact,) = audit_paths([path]).artifacts
    (library,) = artifact.libraries
    return [c for c in library.checks if c.id == "build-paths"]


def _one(path: Path) -> CheckResult:
    (result,) = _results(path)
    return result


def _section(path: Path, name: str) -> tuple[int, int, int]:
    """(offset of the section header, sh_offset, sh_size) of one section."""
    with path.open("rb") as fh:
        elf = ELFFile(fh)
        index = next(i for i, s in enumerate(elf.iter_sections()) if s.name == name)
        section = elf.get_section(index)
        return (elf.header["e_shoff"] + index * elf.header["e_shentsize"], int(section["sh_offset"]),
                int(section["sh_size"]))


def test_a_source_path_is_named_with_where_it_is_and_the_fix(tmp_path: Path) -> None:
    lib = _build(tmp_path, "libsrc.so", _strings(SOURCE) + f'__attribute__((visibility("default"))) char kiln_w[] = '
                 f'"{SOURCE}";\n')
    check = _one(lib)
    assert not check.ok and check.finding == "" and check.is_error
    # One path, in two sections: named once, its places in name order.
    assert check.detail == (f"{lib} embeds 1 path(s) ('{SOURCE}' in .data, .rodata) of the build machine's source "
                            "or build tree.")
    assert check.fix == FIX


def _ordered(lib: Path, paths: list[str]) -> list[str]:
    data = lib.read_bytes()
    return sorted(paths, key=lambda p: data.index(p.encode() + b"\0"))


def test_four_paths_are_shown_and_more_are_counted(tmp_path: Path) -> None:
    paths = [f"/tmp/kilnbuild/ops/k{i}.cpp" for i in range(5)]
    four = _build(tmp_path, "libfour.so", _strings(*paths[:4]))
    shown = "; ".join(f"'{p}' in .rodata" for p in _ordered(four, paths[:4]))
    assert _one(four).detail == f"{four} embeds 4 path(s) ({shown}) of the build machine's source or build tree."
    five = _build(tmp_path, "libfive.so", _strings(*paths))
    shown = "; ".join(f"'{p}' in .rodata" for p in _ordered(five, paths)[:4])
    assert _one(five).detail == (f"{five} embeds 5 path(s) ({shown} and 1 more) of the build machine's source or "
                                 "build tree.")


def test_toolchain_headers_are_a_warning_of_their_own(tmp_path: Path) -> None:
    lib = _build(tmp_path, "libboth.so", _strings(SOURCE, HEADER))
    source, toolchain = _results(lib)
    assert source.detail == (f"{lib} embeds 1 path(s) ('{SOURCE}' in .rodata) of the build machine's source or build "
                             "tree.")
    assert (toolchain.ok, toolchain.finding, toolchain.is_warning) == (False, "toolchain", True)
    assert toolchain.detail == (f"{lib} embeds 1 path(s) ('{HEADER}' in .rodata) of the build machine's toolchain or "
                                "dependency headers (their macros' __FILE__).")
    assert toolchain.fix == TOOLCHAIN_FIX
    only = _build(tmp_path, "libheader.so", _strings(HEADER))
    assert [(c.ok, c.finding) for c in _results(only)] == [(False, "toolchain")]


def test_a_vendored_library_is_blamed_on_its_builder(tmp_path: Path) -> None:
    lib = _build(tmp_path, "libvendor.so", _strings(SOURCE))
    member = "kilntest.libs/libvendor-0a1b2c3d.so"
    wheel = make_wheel(tmp_path, {member: lib.read_bytes()})
    (artifact,) = audit_paths([wheel]).artifacts
    (library,) = artifact.libraries
    (check,) = [c for c in library.checks if c.id == "build-paths"]
    assert (check.ok, check.finding, check.is_warning) == (False, "vendored", True)
    assert check.detail == (f"{member}, a third-party library auditwheel grafted into the wheel, embeds 1 path(s) "
                            f"('{SOURCE}' in .rodata) of its builder's machine.")
    assert check.fix == VENDORED_FIX
    # The project's own library in the wheel is the project's to fix; the match is case-sensitive as zip names are.
    (own := tmp_path / "own").mkdir()
    for name in ("kilntest/libvendor.so", "kilntest.LIBS/libvendor.so"):
        wheel = make_wheel(own, {name: lib.read_bytes()})
        (library,) = audit_paths([wheel]).artifacts[0].libraries
        (check,) = [c for c in library.checks if c.id == "build-paths"]
        assert (check.finding, check.fix) == ("", FIX)
        wheel.unlink()


def test_machine_code_is_not_searched(tmp_path: Path) -> None:
    # Bytes in .text that read like a path are instructions (or data the compiler put there), never a string
    # of the program.
    lib = _build(tmp_path, "libtext.so", '__asm__(".text\\n.asciz \\"/tmp/kilnbuild/ops/in_text.c\\"\\n");\n'
                 '__attribute__((visibility("default"))) int kiln_f(void) { return 1; }\n')
    assert b"/tmp/kilnbuild/ops/in_text.c" in lib.read_bytes()
    assert _one(lib).detail == "no build-machine paths"
    # Before and after the code: both searched.
    both = _build(tmp_path, "libaround.so", _strings(SOURCE) + '__asm__(".text\\n.asciz \\"/tmp/kilnbuild/ops/'
                  'in_text.c\\"\\n");\n', "-Wl,--build-id=0x" + (b"\0/tmp/kb/ops/id.c\0\0\0").hex())
    detail = _one(both).detail
    assert detail == (f"{both} embeds 2 path(s) ('/tmp/kb/ops/id.c' in .note.gnu.build-id; '{SOURCE}' in .rodata) "
                      "of the build machine's source or build tree.")


def test_where_a_path_is_when_no_section_holds_it_or_the_section_has_no_name(tmp_path: Path) -> None:
    # Words before the path and after it in .rodata, so that a cut can end the section just where the path starts.
    lib = _build(tmp_path, "libwhere.so", _strings("kiln words before", SOURCE, "kiln words after"))
    at = lib.read_bytes().index(SOURCE.encode())
    header, offset, size = _section(lib, ".rodata")
    assert offset < at < offset + size - len(SOURCE)
    data = bytearray(lib.read_bytes())
    # .rodata cut to end where the path starts: the path is in no section.
    cut = tmp_path / "libcut.so"
    struct.pack_into("<Q", data, header + 0x20, at - offset)
    cut.write_bytes(bytes(data))
    assert _one(cut).detail == (f"{cut} embeds 1 path(s) ('{SOURCE}' in non-allocated data) of the build machine's "
                                "source or build tree.")
    # .rodata's name taken away (sh_name 0: the empty string).
    data = bytearray(lib.read_bytes())
    struct.pack_into("<I", data, header, 0)
    nameless = tmp_path / "libnameless.so"
    nameless.write_bytes(bytes(data))
    assert _one(nameless).detail == (f"{nameless} embeds 1 path(s) ('{SOURCE}' in ?) of the build machine's source or "
                                     "build tree.")


@pytest.mark.parametrize("window", [12000, 12007, 12011])
def test_a_path_across_a_window_edge_is_seen_once_and_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            window: int) -> None:
    # 1500 paths of 57 characters, each in a 64-byte slot of .rodata: nearly every byte there is inside a path, so
    # windows of these sizes (overlapping by SCAN_OVERLAP) end inside paths again and again.
    paths = [f"/tmp/kilnbuild/ops/{'k' * 29}_{i:04d}.cpp" for i in range(1500)]
    lib = _build(tmp_path, "libmany.so", _strings(*paths))
    _, _begin, size = _section(lib, ".rodata")
    assert size <= 1500 * 64  # no room between the paths but their NUL and alignment
    shown = "; ".join(f"'{p}' in .rodata" for p in _ordered(lib, paths)[:4])
    expected = (f"{lib} embeds 1500 path(s) ({shown} and 1496 more) of the build machine's source or build tree.")
    assert _one(lib).detail == expected  # one window
    monkeypatch.setattr(audit_elf, "SCAN_WINDOW", window)
    assert _one(lib).detail == expected


def test_toolchain_prebuilt_paths_are_noted_beside_a_finding(tmp_path: Path) -> None:
    lib = _build(tmp_path, "libprebuilt.so", _strings(SOURCE, PREBUILT))
    note = (f"1 path(s) of the toolchain's own prebuilt objects (e.g. '{PREBUILT}') are not the project's and were "
            "not counted")
    assert _one(lib).detail == (f"{lib} embeds 1 path(s) ('{SOURCE}' in .rodata) of the build machine's source or "
                                f"build tree. ({note})")
    alone = _build(tmp_path, "libprebuiltonly.so", _strings(PREBUILT))
    assert _one(alone).detail == f"no build-machine paths ({note})"


KERNEL = '__attribute__((visibility("default"))) int kiln_f(int x) { return x; }\n'


def _debug(tmp: Path, name: str, comp_dir: bytes | str, *flags: str, source: str = KERNEL) -> Path:
    """A library compiled with -g from ops/kernel.c, its compile directory recorded as comp_dir."""
    (tmp / "ops").mkdir(parents=True, exist_ok=True)
    (tmp / "ops" / "kernel.c").write_text(source)
    mapping = b"-fdebug-prefix-map=" + str(tmp).encode() + b"=" + (comp_dir if isinstance(comp_dir, bytes)
                                                                    else comp_dir.encode())
    subprocess.run([b"gcc", b"-shared", b"-g", b"-o", name.encode(), b"ops/kernel.c", mapping,
                    *(f.encode() for f in (*HARDENED, *flags))], check=True, capture_output=True, cwd=tmp)
    return tmp / name


DWARF = ".debug_info (DW_AT_comp_dir + DW_AT_name)"


def test_dwarf_joins_the_compile_directory_and_a_relative_name(tmp_path: Path) -> None:
    lib = _debug(tmp_path, "libdwarf.so", "/srv/kilnproj")
    assert _one(lib).detail == (f"{lib} embeds 1 path(s) ('/srv/kilnproj/ops/kernel.c' in {DWARF}) of the build "
                                "machine's source or build tree.")
    # A relative compile directory names no machine's tree: nothing is joined.
    relative = _debug(tmp_path, "librelative.so", ".")
    assert _one(relative).detail == "no build-machine paths"


def test_an_absolute_dwarf_name_is_its_own_string(tmp_path: Path) -> None:
    (tmp_path / "ops").mkdir()
    (tmp_path / "ops" / "kernel.c").write_text('__attribute__((visibility("default"))) int kiln_f(void) '
                                               '{ return 1; }\n')
    lib = tmp_path / "libabsolute.so"
    subprocess.run(["gcc", "-shared", "-g", "-o", str(lib), str(tmp_path / "ops" / "kernel.c"),
                    f"-fdebug-prefix-map={tmp_path}=/srv/kilnabs", *HARDENED], check=True, capture_output=True,
                   cwd="/")
    detail = _one(lib).detail
    assert "'/srv/kilnabs/ops/kernel.c' in " in detail and DWARF not in detail


def test_a_compile_directory_that_is_not_utf8_is_read_with_replacement(tmp_path: Path) -> None:
    lib = _debug(tmp_path, "libbytes.so", b"/srv/kiln\xffproj")
    assert _one(lib).detail == (f"{lib} embeds 1 path(s) ('/srv/kiln\ufffdproj/ops/kernel.c' in {DWARF}) of the "
                                "build machine's source or build tree.")


def test_malformed_dwarf_is_noted_and_its_strings_still_searched(tmp_path: Path) -> None:
    lib = _debug(tmp_path, "libdamaged.so", "/srv/kilnproj")
    _, offset, _size = _section(lib, ".debug_info")
    data = bytearray(lib.read_bytes())
    struct.pack_into("<H", data, offset + 4, 99)  # the first unit's DWARF version
    damaged = tmp_path / "libdamaged-info.so"
    damaged.write_bytes(bytes(data))
    assert _one(damaged).detail == ("no build-machine paths (its debug info is malformed and was not read: only its "
                                    "strings were searched)")
    with_string = _debug(tmp_path, "libdamaged2.so", "/srv/kilnproj", source=_strings(SOURCE))
    _, offset, _size = _section(with_string, ".debug_info")
    data = bytearray(with_string.read_bytes())
    struct.pack_into("<H", data, offset + 4, 99)
    with_string.write_bytes(bytes(data))
    assert _one(with_string).detail == (
        f"{with_string} embeds 1 path(s) ('{SOURCE}' in .rodata) of the build machine's source or build tree. (its "
        "debug info is malformed and was not read: only its strings were searched)")


@pytest.fixture(scope="module")
def big_debug_info(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A library with 2.9 MiB of .debug_info (9000 structs of 24 members)."""
    tmp = tmp_path_factory.mktemp("bigdwarf")
    members = " ".join(f"int m{j};" for j in range(24))
    source = "".join(f"struct kiln_s{i} {{ {members} }}; struct kiln_s{i} kiln_v{i};\n" for i in range(9000))
    return _build(tmp, "libbig.so", source, "-g", "-O0", f"-fdebug-prefix-map={tmp}=/srv/kilnbig")


def test_debug_info_over_the_policys_limit_is_not_read(big_debug_info: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lib = big_debug_info
    _, _offset, info_size = _section(lib, ".debug_info")
    assert info_size >> 20 == 2
    opened = audit_elf.ElfLibrary.open(lib)
    try:
        size = dwarf_bytes(opened)  # .debug_info and every section read with it (.debug_str, .eh_frame...)
    finally:
        opened.close()
    assert size > info_size
    assert _one(lib).detail == (f"{lib} embeds 1 path(s) ('/srv/kilnbig/libbig.so.c' in {DWARF}) of the build "
                                "machine's source or build tree.")
    for name in audit_policy.available_policies():
        policy = audit_policy.load_policy(name)
        monkeypatch.setitem(audit_policy._CACHE, name,
                            replace(policy, build_paths=replace(policy.build_paths, max_dwarf_bytes=size - 1)))
    assert _one(lib).detail == (f"no build-machine paths (its {size >> 20} MiB of DWARF (.debug_info and the "
                                "sections read with it) were not read (more than the policy's max_dwarf_bytes): "
                                "only their strings were searched)")
    for name in audit_policy.available_policies():
        policy = audit_policy.load_policy(name)
        monkeypatch.setitem(audit_policy._CACHE, name,
                            replace(policy, build_paths=replace(policy.build_paths, max_dwarf_bytes=size)))
    assert DWARF in _one(lib).detail  # at the limit: read


@pytest.fixture(scope="module")
def debug_library(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, int, int]:
    """A -g library's bytes and its .debug_info's (offset, size)."""
    lib = _debug(tmp_path_factory.mktemp("dwarf"), "libdebug.so", "/srv/kilnproj")
    _, offset, size = _section(lib, ".debug_info")
    return lib.read_bytes(), offset, size


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(st.integers(min_value=0), st.integers(min_value=0, max_value=255)), min_size=1,
                      max_size=8))
def test_damaged_dwarf_never_breaks_the_audit(debug_library: tuple[bytes, int, int], tmp_path: Path,
                                              edits: list[tuple[int, int]]) -> None:
    # Any bytes of .debug_info changed: the audit still ends with a verdict (the joined path found, or a note that
    # the debug info was not read), never a traceback.
    data, offset, size = debug_library
    damaged = bytearray(data)
    for at, value in edits:
        damaged[offset + at % size] = value
    lib = tmp_path / "libdamaged.so"
    lib.write_bytes(bytes(damaged))
    check = _one(lib)
    assert check.detail.endswith(("only its strings were searched)", "of the build machine's source or build tree.",
                                  "no build-machine paths"))


@pytest.mark.skipif(not NVCC.exists(), reason=f"nvcc is needed ({NVCC})")
def test_paths_only_inside_compressed_ptx_are_found(tmp_path: Path) -> None:
    # -lineinfo puts the kernel's source and its header into the PTX's .file lines; nvcc compresses the PTX, so
    # neither path is anywhere in the library as a string.
    (tmp_path / "inc").mkdir()
    (tmp_path / "ops").mkdir()
    (tmp_path / "inc" / "kiln_k.cuh").write_text("__device__ inline int kiln_twice(int x) { return 2 * x; }\n")
    (tmp_path / "ops" / "k.cu").write_text('#include "kiln_k.cuh"\n'
                                           "__global__ void kiln_k(int *p) { p[threadIdx.x] = kiln_twice(p[0]); }\n")
    lib = tmp_path / "libk.so"
    subprocess.run([str(NVCC), "-shared", "-Xcompiler", "-fPIC", "-lineinfo", "-gencode",
                    "arch=compute_90,code=compute_90", f"-I{tmp_path / 'inc'}", "-o", str(lib), "ops/k.cu"],
                   check=True, capture_output=True, cwd=tmp_path)
    data = lib.read_bytes()
    assert b"kiln_k.cuh" not in data and str(tmp_path).encode() not in data
    assert _one(lib).detail == (f"{lib} embeds 2 path(s) ('{tmp_path}/ops/k.cu' in .nv_fatbin compute_90; "
                                f"'{tmp_path}/inc/kiln_k.cuh' in .nv_fatbin compute_90) of the build machine's source "
                                "or build tree.")


def test_both_notes_are_given_together(tmp_path: Path) -> None:
    # Malformed debug info and a toolchain prebuilt path: both said, beside a finding and beside a pass.
    note = (f"its debug info is malformed and was not read: only its strings were searched; 1 path(s) of the "
            f"toolchain's own prebuilt objects (e.g. '{PREBUILT}') are not the project's and were not counted")
    for name, paths in (("libfinding.so", (SOURCE, PREBUILT)), ("libpass.so", (PREBUILT,))):
        lib = _debug(tmp_path / name.removesuffix(".so"), name, "/srv/kilnproj", source=_strings(*paths))
        _, offset, _size = _section(lib, ".debug_info")
        data = bytearray(lib.read_bytes())
        struct.pack_into("<H", data, offset + 4, 99)
        lib.write_bytes(bytes(data))
        expected = (f"{lib} embeds 1 path(s) ('{SOURCE}' in .rodata) of the build machine's source or build tree. "
                    f"({note})") if SOURCE in paths else f"no build-machine paths ({note})"
        assert _one(lib).detail == expected


# A compile unit of its own, written by hand: DW_AT_name only, no DW_AT_comp_dir (DWARF 4, one abbreviation).
NO_DIRECTORY_UNIT = r"""
__asm__(".section .debug_abbrev,\"\",@progbits\n.Lkiln_abbrev:\n.uleb128 1\n.uleb128 0x11\n.byte 0\n"
        ".uleb128 0x3\n.uleb128 0x8\n.byte 0\n.byte 0\n.byte 0\n"
        ".section .debug_info,\"\",@progbits\n.long .Lkiln_end - .Lkiln_start\n.Lkiln_start:\n.short 4\n"
        ".long .Lkiln_abbrev\n.byte 8\n.uleb128 1\n.asciz \"kiln_nodir.c\"\n.Lkiln_end:\n.text\n");
"""


def test_units_that_name_no_tree_are_passed_over_and_the_next_still_read(tmp_path: Path) -> None:
    # Link order is unit order: a unit without a compile directory, one whose name is absolute and one compiled
    # in a relative directory come before the one that names the project's tree.
    (tmp_path / "ops").mkdir()
    (tmp_path / "ops" / "nodir.c").write_text(NO_DIRECTORY_UNIT)
    (tmp_path / "ops" / "absolute.c").write_text("int kiln_absolute(void) { return 1; }\n")
    (tmp_path / "ops" / "relative.c").write_text("int kiln_relative(void) { return 2; }\n")
    (tmp_path / "ops" / "kernel.c").write_text(KERNEL)
    compile_flags = ["-fPIC", "-O1", "-c"]
    runs = [["gcc", *compile_flags, "-o", "nodir.o", "ops/nodir.c"],
            ["gcc", *compile_flags, "-g", "-o", "absolute.o", str(tmp_path / "ops" / "absolute.c"),
             f"-fdebug-prefix-map={tmp_path}=/srv/kilnabs"],
            ["gcc", *compile_flags, "-g", "-o", "relative.o", "ops/relative.c", f"-fdebug-prefix-map={tmp_path}=."],
            ["gcc", *compile_flags, "-g", "-o", "kernel.o", "ops/kernel.c",
             f"-fdebug-prefix-map={tmp_path}=/srv/kilnproj"],
            ["gcc", "-shared", "-o", "libunits.so", "nodir.o", "absolute.o", "relative.o", "kernel.o", *HARDENED]]
    for run in runs:
        subprocess.run(run, check=True, capture_output=True, cwd=tmp_path)
    lib = tmp_path / "libunits.so"
    with lib.open("rb") as fh:
        units = [u.get_top_DIE().attributes for u in ELFFile(fh).get_dwarf_info().iter_CUs()]
    assert [("DW_AT_comp_dir" in u, u["DW_AT_name"].value) for u in units] == [
        (False, b"kiln_nodir.c"), (True, b"/srv/kilnabs/ops/absolute.c"), (True, b"ops/relative.c"),
        (True, b"ops/kernel.c")]
    assert _one(lib).detail == (f"{lib} embeds 2 path(s) ('/srv/kilnabs/ops/absolute.c' in .debug_line_str; "
                                f"'/srv/kilnproj/ops/kernel.c' in {DWARF}) of the build machine's source or build "
                                "tree.")


def test_debug_info_without_contents_is_not_read(tmp_path: Path) -> None:
    # .debug_info as SHT_NOBITS (what a stripped file keeps of it): its bytes are not its contents.
    lib = _debug(tmp_path, "libnobits.so", "/srv/kilnproj")
    header, _offset, _size = _section(lib, ".debug_info")
    data = bytearray(lib.read_bytes())
    struct.pack_into("<I", data, header + 4, 8)  # sh_type = SHT_NOBITS
    lib.write_bytes(bytes(data))
    assert _one(lib).detail == "no build-machine paths"


def test_the_finder_searches_from_the_first_byte_by_default() -> None:
    from kiln_tool.audit.checks.build_paths import find_build_paths
    from kiln_tool.audit.policy import load_policy

    rule = load_policy("manylinux_2_28").build_paths
    assert find_build_paths(SOURCE.encode() + b"\0", rule) == [(0, SOURCE, "source")]
