"""registration: op libraries carry torch registration initializers; no op namespace twice in a wheel."""

from __future__ import annotations

import re

from ..context import ArtifactContext, LibraryContext
from ..elf import CORRUPT_ELF_ERRORS
from ..report import CheckResult, failed, passed

_CRT_INIT_ENTRIES = 1
_TORCH_NEEDED = re.compile(r"^lib(torch|torch_cpu|c10)\.so$")
# What the registration macros expand to (in .symtab when not stripped): TORCH_LIBRARY(ns, m) ->
# a function TORCH_LIBRARY_init_ns and an object TORCH_LIBRARY_static_init_ns;
# TORCH_LIBRARY_FRAGMENT(ns, m) -> ..._FRAGMENT_init_ns_<C10_UID>; the same with STABLE_ for the
# stable ABI. Mangled, the identifier carries its length: _ZL<n><identifier><parameter types> for
# a static at file scope, _ZN<...>L<n><identifier>E<parameters> inside a C++ namespace.
_LENGTH_PREFIXED = re.compile(r"(?<![0-9])([0-9]+)(?=(?:STABLE_)?TORCH_LIBRARY)")
_INIT_IDENTIFIER = re.compile(
    r"^(?P<kind>(?:STABLE_)?TORCH_LIBRARY(?:_FRAGMENT)?)_(?:static_)?init_(?P<ns>[A-Za-z_][A-Za-z0-9_]*)$")


def _identifiers(name: str) -> list[str]:
    if not name.startswith("_Z"):
        return [name]  # unmangled (a C-linkage build of the macro)
    found = []
    for match in _LENGTH_PREFIXED.finditer(name):
        length = int(match[1])
        identifier = name[match.end():match.end() + length]
        if len(identifier) == length:
            found.append(identifier)
    return found


def parse_init_symbol(name: str) -> tuple[str, str] | None:
    """(macro, namespace) of a registration init function's or object's symbol, e.g.
    ('STABLE_TORCH_LIBRARY', 'torchaudio') for _ZL36STABLE_TORCH_LIBRARY_init_torchaudioRN5torch6stable...;
    None for anything else (TORCH_LIBRARY_IMPL blocks register kernels, not namespaces)."""
    name = name.partition(".")[0]  # .cold / .constprop.0 clones
    for identifier in _identifiers(name):
        found = _INIT_IDENTIFIER.match(identifier)
        if found is None:
            continue
        kind, namespace = found["kind"], found["ns"]
        if kind.endswith("_FRAGMENT"):
            namespace, _, uid = namespace.rpartition("_")
            if not namespace or not uid.isdigit():
                continue
        return kind, namespace
    return None


def registration_refs(ctx: LibraryContext) -> list[str]:
    policy = ctx.artifact.resolver.policy
    return [s.name for s in ctx.lib.dynamic_symbols if not s.defined and policy.is_registration_symbol(s.name)]


def init_namespaces(ctx: LibraryContext) -> dict[str, set[str]]:
    """Macro (TORCH_LIBRARY, ..._FRAGMENT, STABLE_...) -> the namespaces its init functions name."""
    found: dict[str, set[str]] = {}
    if not registration_refs(ctx):
        return found
    try:
        static_names = ctx.lib.static_symbol_names(b"TORCH_LIBRARY")  # every init symbol holds it
    except CORRUPT_ELF_ERRORS:
        static_names = []  # a damaged .symtab: fall back to the build info, as for stripped libraries
    for name in static_names:
        parsed = parse_init_symbol(name)
        if parsed is not None:
            found.setdefault(parsed[0], set()).add(parsed[1])
    return found


def defined_namespaces(ctx: LibraryContext) -> set[str]:
    """Op namespaces this library defines with TORCH_LIBRARY or STABLE_TORCH_LIBRARY (not _IMPL, not
    _FRAGMENT: fragments of one namespace may live in many libraries).

    Unstripped: from the init functions. Stripped: from the build info's op list: the library calls
    the registration API and holds the schema string "<op>(" that m.def takes (the namespace string
    itself is often folded into immediate stores by the compiler).
    """
    if not registration_refs(ctx):
        return set()
    inits = init_namespaces(ctx)
    namespaces = inits.get("TORCH_LIBRARY", set()) | inits.get("STABLE_TORCH_LIBRARY", set())
    if inits:
        return namespaces
    ops = (ctx.artifact.build_info or {}).get("ops")
    for op in ops if isinstance(ops, list) else []:
        namespace, _, name = str(op).partition("::")
        # m.def takes "<op>(", torch::RegisterOperators().op(...) the qualified "<namespace>::<op>(".
        if name and any(ctx.data.find(b"\0" + (prefix + name + "(").encode(), 0) != -1
                        for prefix in ("", f"{namespace}::")):
            namespaces.add(namespace)
    return namespaces


def check_library(ctx: LibraryContext) -> CheckResult | None:
    """For libraries that link torch; None for the others."""
    refs = registration_refs(ctx)
    links_torch = any(_TORCH_NEEDED.match(n) for n in ctx.lib.needed)
    if not refs:
        return None if not links_torch else passed("registration", "links torch, registers no operators")
    # crtbeginS.o puts one entry (frame_dummy) in every gcc/clang-linked library; TORCH_LIBRARY
    # adds its translation unit's static initializer.
    if ctx.lib.init_array_size <= _CRT_INIT_ENTRIES * (ctx.lib.elfclass // 8):
        return failed("registration", f"{ctx.member} references torch's registration API ({refs[0]}) but has no "
                      "static initializers of its own (DT_INIT_ARRAY holds only the C runtime's): its TORCH_LIBRARY "
                      "blocks never run, so its ops never appear.",
                      "keep the static initializers: do not link the registration objects into a static archive that "
                      "drops them, and do not build with -nostartfiles or a linker script that discards .init_array.")
    inits = init_namespaces(ctx)
    named = "; ".join(f"{kind} {', '.join(sorted(ns))}" for kind, ns in sorted(inits.items()))
    return passed("registration", f"registration initializers present ({len(refs)} registration API symbol(s) "
                  f"referenced: {', '.join(sorted(set(refs))[:4])}{' and more' if len(set(refs)) > 4 else ''}"
                  + (f"; {named})" if named else ")"))


def check_wheel(artifact: ArtifactContext) -> CheckResult | None:
    """Across the libraries of one wheel: every namespace of the build info registered, none twice."""
    owners: dict[str, list[str]] = {}
    fragments: dict[str, list[str]] = {}  # TORCH_LIBRARY_FRAGMENT blocks register ops of a namespace too
    for lib in artifact.libraries:
        for namespace in defined_namespaces(lib):
            owners.setdefault(namespace, []).append(lib.member)
        inits = init_namespaces(lib)
        for namespace in inits.get("TORCH_LIBRARY_FRAGMENT", set()) | inits.get("STABLE_TORCH_LIBRARY_FRAGMENT", set()):
            fragments.setdefault(namespace, []).append(lib.member)
    problems: list[str] = []
    for namespace, libs in sorted(owners.items()):
        if len(libs) > 1:
            problems.append(f"namespace '{namespace}' is defined (TORCH_LIBRARY) by {len(libs)} libraries: "
                            f"{', '.join(libs)}; the second import fails with \"Only a single TORCH_LIBRARY can be "
                            f"used to register the namespace {namespace}\"")
    info = artifact.build_info or {}
    ops = info.get("ops") if isinstance(info.get("ops"), list) else []
    expected = sorted({str(op).partition("::")[0] for op in ops or [] if "::" in str(op)})
    for namespace in expected:
        if namespace not in owners and namespace not in fragments:
            problems.append(f"the build info lists ops of namespace '{namespace}' but no library in the wheel "
                            "registers them")
    if problems:
        return failed("registration", "; ".join(problems) + ".",
                      "define each namespace with exactly one TORCH_LIBRARY (other files use TORCH_LIBRARY_IMPL or "
                      "TORCH_LIBRARY_FRAGMENT), and link the registration sources into the extension the build info "
                      "describes.")
    if not owners and not expected and not fragments:
        return None
    named = [f"{ns} ({libs[0]})" for ns, libs in sorted(owners.items())]
    named += [f"{ns} (fragments in {', '.join(libs)})" for ns, libs in sorted(fragments.items()) if ns not in owners]
    return passed("registration", f"namespaces: {', '.join(named)}")
