"""textrel, exec-stack and rpath (audit/checks/hardening.py) case by case, with the words a maintainer reads:
each way a library can be linked wrong, built from a tiny C source (or its stack header removed), named by
its check with its own detail and fix; and what a right one is told."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from audit_corpus import Corpus, make_wheel
from elftools.elf.elffile import ELFFile

from kiln_tool.audit import CheckResult, audit_paths

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is needed")

PT_GNU_STACK = 0x6474E551


def _checks(path: Path, member: str | None = None) -> dict[str, CheckResult]:
    (artifact,) = audit_paths([path]).artifacts
    libraries = [lib for lib in artifact.libraries if member is None or lib.path == member]
    (library,) = libraries
    return {c.id: c for c in library.checks if not c.finding}


def _linked(tmp: Path, name: str, *flags: str) -> Path:
    (tmp / "f.c").write_text("int kiln_f(void) { return 1; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", name, "f.c", "-Wl,-z,noexecstack", *flags], check=True,
                   capture_output=True, cwd=tmp)
    return tmp / name


@pytest.mark.parametrize(("library", "check_id", "detail", "fix", "right"), [
    ("libtextrel.so", "textrel",
     "has text relocations (DT_TEXTREL/DF_TEXTREL): some object in it was compiled without -fPIC, so the loader "
     "must write to its code pages.",
     "compile every object with -fPIC (CMake: POSITION_INDEPENDENT_CODE ON, also for static libraries linked in) "
     "and link with -Wl,-z,text so the linker refuses text relocations.",
     "no text relocations"),
    ("libexecstack.so", "exec-stack",
     "asks for an executable stack (PT_GNU_STACK flags RWX); loading it makes every thread's stack executable, and "
     "hardened kernels refuse it.",
     "link with -Wl,-z,noexecstack, and find the object without a .note.GNU-stack section (usually an assembly "
     "file: add `.section .note.GNU-stack,\"\",@progbits`).",
     "stack not executable"),
])
def test_each_link_defect_is_named_with_its_cause_and_fix(corpus: Corpus, library: str, check_id: str, detail: str,
                                                          fix: str, right: str) -> None:
    lib = corpus[library]
    check = _checks(lib)[check_id]
    assert not check.ok
    assert (check.detail, check.fix) == (f"{lib} {detail}", fix)
    assert _checks(corpus["libplain.so"])[check_id].detail == right


def test_a_library_without_a_stack_header_gets_an_executable_stack(tmp_path: Path) -> None:
    lib = _linked(tmp_path, "libnostack.so")
    data = bytearray(lib.read_bytes())
    with lib.open("rb") as fh:
        elf = ELFFile(fh)
        header = elf.header
        (index,) = [i for i, seg in enumerate(elf.iter_segments()) if seg["p_type"] == "PT_GNU_STACK"]
    at = header["e_phoff"] + index * header["e_phentsize"]
    assert struct.unpack_from("<I", data, at)[0] == PT_GNU_STACK
    struct.pack_into("<I", data, at, 0)  # PT_NULL: the header is gone
    lib.write_bytes(bytes(data))
    check = _checks(lib)["exec-stack"]
    assert not check.ok and check.id == "exec-stack"
    assert check.detail == f"{lib} has no PT_GNU_STACK header, so the loader gives the process an executable stack."
    assert check.fix == "link with -Wl,-z,noexecstack."


RPATH_FIX = ("set only $ORIGIN-relative entries (CMake: INSTALL_RPATH \"$ORIGIN;$ORIGIN/../torch/lib\" with "
             "BUILD_WITH_INSTALL_RPATH ON), or drop them with `patchelf --remove-rpath` / `kiln repair`.")


def test_each_bad_search_path_entry_is_named_in_order(tmp_path: Path) -> None:
    lib = _linked(tmp_path, "librp.so", "-Wl,--disable-new-dtags", "-Wl,-rpath,/opt/x:lib::$ORIGIN/ok")
    check = _checks(lib)["rpath"]
    assert not check.ok
    assert check.detail == (f"{lib}: RPATH entry '/opt/x' is absolute (a path of the build machine); RPATH entry "
                            "'lib' is relative to the current working directory; RPATH has an empty entry (searches "
                            "the current working directory).")
    assert check.fix == RPATH_FIX


def test_a_search_path_that_leaves_site_packages_is_refused_in_a_wheel(tmp_path: Path) -> None:
    files = {"kilnlib/sub/libout.so": _linked(tmp_path, "libout.so", "-Wl,--enable-new-dtags",
                                              "-Wl,-rpath,$ORIGIN/../../../lib:${ORIGIN}/../../torch/lib").read_bytes()}
    check = _checks(make_wheel(tmp_path, files), "kilnlib/sub/libout.so")["rpath"]
    assert not check.ok
    assert check.detail == "kilnlib/sub/libout.so: RUNPATH entry '$ORIGIN/../../../lib' leaves site-packages."


def test_a_right_search_path_is_shown_whole(tmp_path: Path) -> None:
    files = {"kilnlib/libok.so": _linked(tmp_path, "libok.so", "-Wl,--enable-new-dtags",
                                         "-Wl,-rpath,$ORIGIN:${ORIGIN}/../torch/lib:$ORIGIN/..").read_bytes(),
             "kilnlib/libnone.so": _linked(tmp_path, "libnone.so").read_bytes()}
    wheel = make_wheel(tmp_path, files)
    ok = _checks(wheel, "kilnlib/libok.so")["rpath"]
    assert ok.ok and ok.detail == "search path: $ORIGIN:${ORIGIN}/../torch/lib:$ORIGIN/.."  # .. is site-packages
    none = _checks(wheel, "kilnlib/libnone.so")["rpath"]
    assert none.ok and none.detail == "search path: none"

