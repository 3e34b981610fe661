"""textrel, exec-stack, rpath: how the library was linked."""

from __future__ import annotations

import posixpath

from ..context import LibraryContext
from ..report import CheckResult, failed, passed
from ..resolve import SITE


def check_textrel(ctx: LibraryContext) -> CheckResult:
    if ctx.lib.has_textrel:
        return failed("textrel", f"{ctx.member} has text relocations (DT_TEXTREL/DF_TEXTREL): some object in it was "
                      "compiled without -fPIC, so the loader must write to its code pages.",
                      "compile every object with -fPIC (CMake: POSITION_INDEPENDENT_CODE ON, also for static "
                      "libraries linked in) and link with -Wl,-z,text so the linker refuses text relocations.")
    return passed("textrel", "no text relocations")


def check_exec_stack(ctx: LibraryContext) -> CheckResult:
    flags = ctx.lib.stack_flags
    if flags is None:
        return failed("exec-stack", f"{ctx.member} has no PT_GNU_STACK header, so the loader gives the process an "
                      "executable stack.", "link with -Wl,-z,noexecstack.")
    if ctx.lib.executable_stack:
        return failed("exec-stack", f"{ctx.member} asks for an executable stack (PT_GNU_STACK flags RWX); loading it "
                      "makes every thread's stack executable, and hardened kernels refuse it.",
                      "link with -Wl,-z,noexecstack, and find the object without a .note.GNU-stack section "
                      "(usually an assembly file: add `.section .note.GNU-stack,\"\",@progbits`).")
    return passed("exec-stack", "stack not executable")


def check_rpath(ctx: LibraryContext) -> CheckResult:
    problems: list[str] = []
    for tag, entries in (("RPATH", ctx.lib.rpath), ("RUNPATH", ctx.lib.runpath)):
        for entry in entries or []:
            normalized = entry.replace("${ORIGIN}", "$ORIGIN")
            if entry == "":
                problems.append(f"{tag} has an empty entry (searches the current working directory)")
            elif normalized.startswith("/"):
                problems.append(f"{tag} entry '{entry}' is absolute (a path of the build machine)")
            elif not (normalized == "$ORIGIN" or normalized.startswith("$ORIGIN/")):
                problems.append(f"{tag} entry '{entry}' is relative to the current working directory")
            elif ctx.location.member is not None:
                resolved = posixpath.normpath(normalized.replace("$ORIGIN", ctx.location.origin))
                if not (resolved == SITE or resolved.startswith(SITE + "/")):
                    problems.append(f"{tag} entry '{entry}' leaves site-packages")
    if problems:
        return failed("rpath", f"{ctx.member}: " + "; ".join(problems) + ".",
                      "set only $ORIGIN-relative entries (CMake: INSTALL_RPATH \"$ORIGIN;$ORIGIN/../torch/lib\" with "
                      "BUILD_WITH_INSTALL_RPATH ON), or drop them with `patchelf --remove-rpath` / `kiln repair`.")
    entries = (ctx.lib.runpath or []) + (ctx.lib.rpath or [])
    return passed("rpath", "search path: " + (":".join(entries) if entries else "none"))
