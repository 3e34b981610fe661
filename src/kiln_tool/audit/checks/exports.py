"""exports: a library exports nothing beyond what it must."""

from __future__ import annotations

import fnmatch

from ..context import LibraryContext
from ..elf import DynSymbol, ElfLibrary
from ..report import CheckResult, failed, passed
from ..resolve import Location

_EXPORTED_BINDS = {"STB_GLOBAL", "STB_WEAK", "STB_LOOS", "STB_GNU_UNIQUE"}
_EXPORTED_VISIBILITY = {"STV_DEFAULT", "STV_PROTECTED"}


def exported_symbols(ctx: LibraryContext) -> list[DynSymbol]:
    """Exports the library's code chose: not version nodes, not the linker's own boundary symbols."""
    version_names = set(ctx.lib.version_definitions.values())
    linker_defined = ctx.artifact.resolver.policy.linker_defined_symbols
    return [s for s in ctx.lib.dynamic_symbols
            if s.defined and s.bind in _EXPORTED_BINDS and s.visibility in _EXPORTED_VISIBILITY
            and s.type not in ("STT_SECTION", "STT_FILE") and s.name not in version_names
            and s.name not in linker_defined]


def _sample(names: list[str], n: int = 6) -> str:
    shown = ", ".join(names[:n])
    return shown + (f" and {len(names) - n} more" if len(names) > n else "")


def imported_by_siblings(ctx: LibraryContext, names: list[str]) -> dict[str, list[str]]:
    """Those of `names` that other libraries of the wheel import from this one: they name it in DT_NEEDED (its
    file name or soname) and leave the symbol undefined. Hiding them would break those libraries."""
    keys = {ctx.filename, ctx.lib.soname} - {None}
    consumers = sorted({m for k in keys for m in ctx.artifact.needed_by.get(str(k), ()) if m != ctx.member})
    wanted = set(names)
    imported: dict[str, list[str]] = {}
    for member in consumers:
        other = ctx.artifact.resolver.open(Location(member=member))
        if not isinstance(other, ElfLibrary):
            continue
        for symbol in other.dynamic_symbols:
            if not symbol.defined and symbol.name in wanted and member not in imported.get(symbol.name, []):
                imported.setdefault(symbol.name, []).append(member)
    return imported


def _siblings_said(imported: dict[str, list[str]]) -> str:
    if not imported:
        return ""
    users = sorted({m for ms in imported.values() for m in ms})
    return (f"; {len(imported)} export(s) that {', '.join(users)} of the same wheel import "
            f"({_sample(sorted(imported))}): its API inside the wheel, kept")


def check_exports(ctx: LibraryContext) -> CheckResult:
    exported = sorted({s.name for s in exported_symbols(ctx)})
    module = ctx.extension_module
    if module is not None:
        init = f"PyInit_{module}"
        extra = [n for n in exported if n != init]
        named = ctx.artifact.api.named_in_python(extra) if ctx.artifact.api is not None else {}
        extra = [n for n in extra if n not in named]
        siblings = imported_by_siblings(ctx, extra) if extra else {}
        extra = [n for n in extra if n not in siblings]
        problems = []
        if init not in exported:
            problems.append(f"does not export {init} (and registers no torch operators, so it is no "
                            "torch.ops.load_library op library either), so `import` fails")
        if extra:
            problems.append(f"exports {len(extra)} symbol(s) besides {init}: {_sample(extra)}")
        if problems:
            return failed("exports", f"extension module {ctx.member} " + "; ".join(problems)
                          + _siblings_said(siblings) + ".",
                          f"build with -fvisibility=hidden -fvisibility-inlines-hidden, declare the init with "
                          f"PyMODINIT_FUNC, and link with a version script exporting only {init} "
                          "(global: PyInit_...; local: *;) plus -Wl,--exclude-libs,ALL.")
        if named:
            return passed("exports", f"exports {init} and {len(named)} symbol(s) the wheel's Python names for lookup "
                          f"by name (dlsym, ctypes; evidence: {_evidence(named)}){_siblings_said(siblings)}")
        return passed("exports", f"exports only {init}{_siblings_said(siblings)}")
    allowed = ctx.artifact.resolver.policy.allowed_exports(ctx.member)
    patterns = tuple(allowed or ()) + ctx.artifact.extra_exports
    extra = [n for n in exported if not any(fnmatch.fnmatchcase(n, p) for p in patterns)]
    evidence = ctx.artifact.api
    named = evidence.named_in_python(extra) if evidence is not None else {}
    extra = [n for n in extra if n not in named]
    siblings = imported_by_siblings(ctx, extra) if extra else {}
    extra = [n for n in extra if n not in siblings]
    said = (f"; {len(named)} symbol(s) the wheel's Python names for lookup by name (evidence: {_evidence(named)})"
            if named else "") + _siblings_said(siblings)
    sdk = evidence.sdk(ctx.member) if evidence is not None and extra else None
    if sdk is not None:
        return passed("exports", f"public SDK library: its {len(extra)} export(s) are its API (evidence: {sdk}){said}")
    runtime = evidence.runtime_dir(ctx.member) if evidence is not None and extra and ctx.loaded_by is None else None
    if runtime is not None and not any(_reserved(n) for n in extra):
        return passed("exports", f"a runtime loaded from its folder, which {runtime} names: its C API of "
                      f"{len(extra)} symbol(s) ({_sample(extra)}){said}")
    if ctx.loaded_by is not None:
        # Loaded by name (ctypes, dlopen): its unmangled exports are the C API the loader calls; reserved
        # identifiers (C11 7.1.3: "__" or "_" and a capital) are internals that leaked: C++ names (mangled,
        # _Z...) and the compiler's own (__cudaRegisterLinkedBinary_*, __hip_cuid_*).
        leaked = [n for n in extra if _reserved(n)]
        c_api = [n for n in extra if n not in set(leaked)]
        api = f"its C API of {len(c_api)} symbol(s) ({_sample(c_api)}) is what the loader calls" if c_api \
            else "it exports no C API"
        if leaked:
            return failed("exports", f"library {ctx.member}, loaded by name by {ctx.loaded_by} (ctypes/dlopen): "
                          f"{api}{said}; it also exports {len(leaked)} C++ or compiler-internal symbol(s) that leaked: "
                          f"{_sample(leaked)}. Exported symbols collide with other libraries loaded into the process.",
                          "keep the extern \"C\" API and hide the rest: -fvisibility=hidden with the API marked "
                          "__attribute__((visibility(\"default\"))), or a version script listing only it; "
                          "-Wl,--exclude-libs,ALL for static dependencies.")
        return passed("exports", f"loaded by name by {ctx.loaded_by}: {api}{said}")
    if extra:
        kind = "op library (torch.ops.load_library)" if ctx.op_library else "library"
        kept = (f" (keep the {len(siblings)} that other libraries of the wheel import: "
                f"{_sample(sorted(siblings))})" if siblings else "")
        return failed("exports", f"{kind} {ctx.member} exports {len(extra)} symbol(s) no allowlist covers: "
                      f"{_sample(extra)}{said}. Exported symbols collide with other libraries loaded into the process.",
                      f"hide them{kept} (-fvisibility=hidden, a version script, -Wl,--exclude-libs,ALL), or list the "
                      "library's public API in the policy's \"exports\" (data/audit_policy/common.json).")
    return passed("exports", f"{len(exported)} exported symbol(s), all allowed{said}")


def _reserved(name: str) -> bool:
    """A reserved identifier (C11 7.1.3: "__", or "_" and a capital): C++ names (_Z...), the compiler's own."""
    return name.startswith("__") or (len(name) > 1 and name[0] == "_" and name[1].isupper())


def _evidence(named: dict[str, str]) -> str:
    files = sorted(set(named.values()))
    return ", ".join(f"{s} in {named[s]}" for s in sorted(named)[:3]) + (
        f" and {len(named) - 3} more" if len(named) > 3 else "") + (f" ({len(files)} files)" if len(files) > 1 else "")
