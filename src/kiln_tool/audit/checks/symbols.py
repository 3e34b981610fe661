"""undefined-symbols and symbol-versions: what the library needs from others, and from the system."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping

from ..context import LibraryContext
from ..elf import DynSymbol
from ..policy import parse_version
from ..report import CheckResult, failed, passed
from ..resolve import SITE, Location, Opened, expand_search_entry
from ..torch_abi import RecordedLibrary

_TORCH_LIBS = re.compile(r"^lib(torch|c10|caffe2|shm)[a-z0-9_]*\.so")
# The CUDA runtime a CUDA torch loads from its nvidia-* wheels (libtorch_cuda.so's NEEDED): with no torch of the
# wheel's processor installed or recorded, whether that torch brings them is unknown, not missing.
_TORCH_RUNTIME = re.compile(r"^lib(cudart|cublas|cublasLt|cudnn\w*|nccl|nvrtc\w*|cufft\w*|curand|cusparse\w*|"
                            r"cusolver\w*|nvJitLink|cupti|nvToolsExt|nvshmem\w*|cufile\w*)\.so")
_VERSION_RE = re.compile(r"^([A-Z]+)_(.+)$")
_GLIBC_LIBS = re.compile(r"^(libc|libm|libpthread|libdl|librt|libutil|libanl|libresolv|libnsl)\.so\.\d+$")
_MAX_SHOWN = 8


def _sample(items: list[str]) -> str:
    return ", ".join(items[:_MAX_SHOWN]) + (f" and {len(items) - _MAX_SHOWN} more" if len(items) > _MAX_SHOWN else "")


def _search_dirs(ctx: LibraryContext) -> set[str]:
    """The folders ld.so searches for the library's DT_NEEDED names in the installed layout (its DT_RPATH
    without a DT_RUNPATH, and its DT_RUNPATH, $ORIGIN expanded)."""
    lib = ctx.lib
    entries = (lib.rpath or []) if lib.runpath is None else lib.runpath
    return {d for e in entries if e and (d := expand_search_entry(e, ctx.location.origin)) is not None}


def _provides(lib: Opened, symbol: DynSymbol) -> bool:
    """Whether `lib` is known to define the symbol (a library whose exports are unknown never is)."""
    if isinstance(lib, RecordedLibrary):
        return not lib.opaque and lib.exports(symbol.name, symbol.version)
    for definition in lib.definitions(symbol.name):
        if symbol.version is None:
            if not definition.version_hidden:
                return True
        elif definition.version == symbol.version:
            return True
    return False


def _platform_version(version: str | None, ceilings: Mapping[str, object]) -> bool:
    """A symbol version of a namespace the policy bounds (GLIBC_2.17, GLIBCXX_3.4.21, CXXABI_1.3, GCC_3.0)."""
    match = _VERSION_RE.match(version or "")
    return match is not None and match[1] in ceilings


def _torch_hint(ctx: LibraryContext) -> str:
    torch = ctx.artifact.torch
    if torch is None:
        return f" No target torch was found ({ctx.artifact.torch_problem})."
    return f" Target torch: {torch.describe()}."


def check_undefined_symbols(ctx: LibraryContext) -> list[CheckResult]:
    """The main result, plus a 'preload' warning for libraries of the wheel that resolve only when
    the package loads them first, and a 'target-unknown' error when the torch to check against is
    neither installed nor recorded."""
    lib = ctx.lib
    resolver = ctx.artifact.resolver
    problems: list[str] = []
    missing_libs: list[str] = []
    resolved: list[str] = []
    preloaded: list[str] = []
    direct: list[tuple[str, Opened]] = []
    unknown: list[str] = []  # needed libraries whose exports are not known (not recorded, the driver)
    unknown_why: dict[str, str] = {}
    platform_libs: set[str] = set()  # system libraries of the wheel's platform that this host lacks
    extra: list[CheckResult] = []
    for name in lib.needed:
        found = resolver.find(name, ctx.location, lib)
        if found is None:
            missing_libs.append(name)
            continue
        if found.preload:
            preloaded.append(f"{name} ({found.location.describe()}; {found.via})")
        resolved.append(f"{name} from {found.location.describe()} ({found.via})")
        dep = resolver.open(found.location)
        if found.location.platform is not None:
            platform_libs.add(name)
        if found.location.unknown:
            unknown.append(name)
            unknown_why[name] = found.location.describe()
        elif dep is not None:
            direct.append((name, dep))
    if preloaded:
        extra.append(failed(
            "undefined-symbols", f"{ctx.member} needs {', '.join(preloaded)}: no RUNPATH/RPATH of it reaches "
            "the library, so ld.so finds it only if the package has loaded it before (import order, "
            "ctypes.CDLL or torch.ops.load_library of it first); loading this library on its own fails.",
            "add an $ORIGIN-relative RUNPATH to the directory of the needed library (CMake INSTALL_RPATH, "
            "patchelf --set-rpath), so it loads in any order.", "preload"))
    arch = ctx.artifact.arch
    foreign = arch != resolver.host
    torch_missing = [n for n in missing_libs if _TORCH_LIBS.match(n) or (
        foreign and ctx.artifact.torch is None and _TORCH_RUNTIME.match(n))]
    if ctx.artifact.torch is None and torch_missing and foreign:
        # Another processor's torch cannot be installed here; without its record nothing can be checked.
        extra.append(failed(
            "undefined-symbols", f"{ctx.member} needs {', '.join(torch_missing)} of a torch for {arch} (and the "
            f"CUDA runtime such a torch loads), which is "
            f"neither installed on this {resolver.host} host nor recorded for {arch}: {ctx.artifact.torch_problem}. "
            "Its torch symbols were not checked (not failed: a torch of another processor is never a target).",
            f"record that torch's {arch} wheel: `scripts/kiln torch-abi --for-wheels WHEEL` downloads and records "
            "it (kiln release does this before its audit).", "arch-unrecorded"))
    elif ctx.artifact.torch is None and torch_missing:
        extra.append(failed(
            "undefined-symbols", f"{ctx.member} needs {', '.join(torch_missing)} of the target torch, which is "
            f"neither installed here nor recorded: {ctx.artifact.torch_problem}. Its torch symbols, symbol "
            "versions and C++ ABI were not checked.",
            "audit where that torch is installed (--torch-lib DIR), or record it: `scripts/kiln torch-abi "
            "<torch wheel>` (pip download --no-deps torch==X) and commit data/torch_abi/.", "target-unknown"))
    if ctx.artifact.torch is None and torch_missing:
        missing_libs = [n for n in missing_libs if n not in torch_missing]
        if missing_libs:
            problems.append(f"needed libraries not found in the installed layout: {_sample(missing_libs)}")
        result = failed("undefined-symbols", f"{ctx.member}: " + "; ".join(problems) + ".",
                        "link every library whose symbols you use with $ORIGIN-relative RUNPATHs.") if problems \
            else passed("undefined-symbols", "non-torch libraries resolved; symbols not checked without the "
                        "target torch")
        return [result, *extra]
    stray = sorted(set(lib.version_needs) - set(lib.needed))
    if stray:
        problems.append(f"version needs name libraries missing from DT_NEEDED: {', '.join(stray)}")

    policy = resolver.policy
    ceilings = policy.symbol_versions.get(arch, {})
    inactive = ctx.inactive_variant
    scope: list[tuple[str, Location, Opened]] | None = None
    torch_loaded: list[tuple[str, Location, Opened]] | None = None
    providers: dict[str, int] = {}  # needed library -> how many of the undefined symbols it provides
    unresolved: list[str] = []
    indirect: list[str] = []
    closure: dict[str, int] = {}  # library of the NEEDED closure (not named in DT_NEEDED) -> symbols it binds
    unchecked: list[str] = []
    left_to_missing: list[str] = []  # symbols no library found provides, while a needed library is missing
    for symbol in lib.dynamic_symbols:
        if symbol.defined or symbol.bind == "STB_WEAK":
            continue
        if ctx.loaded_by_python and policy.provided_by_interpreter(symbol.name):
            continue
        if symbol.version_file in platform_libs and _platform_version(symbol.version, ceilings):
            # GLIBC_2.17 from libc.so.6 of the manylinux platform: whether the platform has that version is
            # exactly what symbol-versions judges; the library itself is not on this host to read.
            providers[symbol.version_file] = providers.get(symbol.version_file, 0) + 1
            continue
        provider = next((name for name, dep in direct if _provides(dep, symbol)), None)
        if provider is not None:
            providers[provider] = providers.get(provider, 0) + 1
            continue
        if scope is None:
            scope = [entry for entry in resolver.scope(ctx.location, lib) if not entry[1].unknown]
            for name, location, _ in resolver.scope(ctx.location, lib):
                if location.unknown and name not in unknown:
                    unknown.append(name)
                    unknown_why[name] = f"{location.describe()}, which a needed library pulls in"
        provider = next((name for name, _, dep in scope if _provides(dep, symbol)), None)
        if provider is not None:
            if symbol.version_file and _GLIBC_LIBS.match(symbol.version_file) and _GLIBC_LIBS.match(provider):
                # Since glibc 2.34, pthread_create@GLIBC_2.2.5 needed "from libpthread.so.0" lives in
                # libc.so.6; ld.so binds it there.
                providers[provider] = providers.get(provider, 0) + 1
            else:
                # ld.so searches the library's whole NEEDED closure: it always loads with it, so this binds.
                closure[provider] = closure.get(provider, 0) + 1
            continue
        if torch_loaded is None:
            # A variant for another platform is never loaded beside this torch's libraries.
            torch_loaded = [] if inactive is not None else [
                entry for entry in resolver.loaded_by_torch() if not entry[1].unknown]
        provider = None if symbol.version_file in missing_libs else next(
            (name for name, _, dep in torch_loaded if _provides(dep, symbol)), None)
        if provider is not None:
            indirect.append(f"{symbol.display()} (only in {provider}, loaded by import torch, not in NEEDED)")
            continue
        owner = symbol.version_file
        if missing_libs and (owner in missing_libs or owner is None) and not policy.is_torch_symbol(symbol.name):
            left_to_missing.append(symbol.display())
        elif owner is not None and owner in unknown:
            unchecked.append(f"{symbol.display()} (from {owner})")
        elif unknown and owner is None and not policy.is_torch_symbol(symbol.name):
            unchecked.append(symbol.display())
        else:
            unresolved.append(symbol.display())
    if inactive is not None and missing_libs:
        # Its platform's libraries come with a torch of that platform, never with this one.
        extra.append(failed(
            "undefined-symbols", f"{inactive}, so it is never loaded with it: the libraries it needs that this "
            f"torch does not provide ({_sample(missing_libs)}) and the {len(left_to_missing)} undefined symbol(s) "
            f"left to them were not checked.",
            "nothing, if the package loads only the variant of the running torch; audit against a torch of this "
            "variant's platform (--torch VERSION) to check it.", "variant"))
        missing_libs = []
        left_to_missing = []
    from_dependency = {n: d for n in missing_libs if (d := ctx.artifact.dependency_providing(n)) is not None}
    if from_dependency:
        extra.append(failed(
            "undefined-symbols", f"{ctx.member} needs "
            + "; ".join(f"{n}, which the declared dependency {d} ships" for n, d in from_dependency.items())
            + ": no RUNPATH of it reaches that library, so it loads only after the package has loaded it (ctypes "
            "preload, import order); its symbols were not checked.",
            "add an $ORIGIN-relative RUNPATH to the dependency's library folder (e.g. $ORIGIN/../nvidia/cublas/lib), "
            "so it loads in any order.", "dependency"))
        missing_libs = [n for n in missing_libs if n not in from_dependency]
        left_to_missing = [] if not missing_libs else left_to_missing
    fetched = ctx.artifact.fetched
    if fetched is not None and missing_libs:
        # --fetch-dependencies: the uninstalled dependencies' wheels were read; each library is shipped by one
        # (reached by a RUNPATH in the installed layout, or not) or by none (missing).
        searched = _search_dirs(ctx)
        reached = {n: fetched[n] for n in missing_libs if n in fetched
                   and posixpath.dirname(posixpath.join(SITE, fetched[n].path)) in searched}
        unreached = {n: fetched[n] for n in missing_libs if n in fetched and n not in reached}
        if reached:
            extra.append(passed(
                "undefined-symbols", f"{ctx.member} needs " + "; ".join(
                    f"{n}, which the declared dependency {f.dependency} ships as {f.path} (its wheel downloaded "
                    "with pip download --no-deps), and its RUNPATH reaches it there" for n, f in reached.items())
                + "; the symbols left to it were not checked against it."))
        if unreached:
            extra.append(failed(
                "undefined-symbols", f"{ctx.member} needs " + "; ".join(
                    f"{n}, which the declared dependency {f.dependency} ships as {f.path} (its wheel downloaded "
                    "with pip download --no-deps)" for n, f in unreached.items())
                + ": no RUNPATH of it reaches that folder, so it loads only after the package has loaded it "
                "(ctypes preload, import order); its symbols were not checked.",
                "add an $ORIGIN-relative RUNPATH to that folder, so it loads in any order.", "dependency"))
        missing_libs = [n for n in missing_libs if n not in fetched]
        left_to_missing = [] if not missing_libs else left_to_missing
        if missing_libs and ctx.artifact.uninstalled_dependencies():
            problems.append(f"none of the declared dependencies' wheels ships {_sample(missing_libs)} (downloaded "
                            f"with pip download --no-deps: {', '.join(ctx.artifact.uninstalled_dependencies())})")
    # Only a missing library asks: what is installed where the audit runs is read once, and only then.
    uninstalled = ctx.artifact.uninstalled_dependencies() if fetched is None and missing_libs else []
    maybe = [n for n in missing_libs if not _TORCH_LIBS.match(n)] if uninstalled else []
    if maybe:
        # Any of them may ship it, whatever its name (libcue_ops.so in <project>-ops-cu13): the evidence is that
        # it is in no place this audit can see, and that they are not here to look into.
        extra.append(failed(
            "undefined-symbols", f"{ctx.member} needs {_sample(maybe)}, which {'is' if len(maybe) == 1 else 'are'} "
            f"in neither the wheel, torch nor the platform; the wheel declares dependencies that are installed "
            f"nowhere this audit runs ({', '.join(repr(d) for d in uninstalled)}), which may ship "
            f"{'it' if len(maybe) == 1 else 'them'}: whether one does, and the symbols left to "
            f"{'it' if len(maybe) == 1 else 'them'}, were not checked (unknown, not missing).",
            "nothing, if a dependency ships it and the library's RUNPATH reaches it; to check, rerun with "
            "--fetch-dependencies (downloads their wheels with pip download --no-deps and reads their file lists), "
            "or audit where they are installed beside torch (--torch-lib DIR of that site-packages).",
            "dependency-unknown"))
        missing_libs = [n for n in missing_libs if n not in maybe]
        left_to_missing = [] if not missing_libs else left_to_missing
    if missing_libs:
        left = (f" ({len(left_to_missing)} undefined symbol(s) that no library found provides are left to them: "
                f"{_sample(left_to_missing)})" if left_to_missing else "")
        problems.insert(0, f"needed libraries not found in the installed layout: {_sample(missing_libs)}{left}")
    if unresolved:
        problems.append(f"{len(unresolved)} undefined symbol(s) no needed library provides: {_sample(unresolved)}")
    if indirect:
        problems.append(f"{len(indirect)} symbol(s) come only from libraries outside its own NEEDED closure "
                        f"(underlinked: no library it loads brings them; it breaks unless `import torch` has "
                        f"loaded them first): {_sample(indirect)}")
    if unchecked:
        extra.append(failed(
            "undefined-symbols", f"{ctx.member}: {len(unchecked)} undefined symbol(s) not checked: no library whose "
            f"exports are known provides them, and {'; '.join(unknown_why.get(n, n) for n in unknown)} may: "
            f"{_sample(unchecked)}.",
            f"nothing to fix if they are the {arch} platform's; to check them, run the audit on {arch} itself (or "
            f"where {arch} system libraries are in /usr/lib/{arch}-linux-gnu)." if set(unknown) <= platform_libs else
            "nothing to fix in the library if they are that library's API; to check them, record the exports of "
            "torch's runtime wheels (`scripts/kiln torch-abi --runtime SITE_PACKAGES`) or audit where they are "
            "installed (--torch-lib DIR).", "unchecked"))
    if problems:
        torch_related = any(_TORCH_LIBS.match(n) for n in missing_libs) or any(
            policy.is_torch_symbol(s.split("@", 1)[0]) for s in unresolved)
        hint = _torch_hint(ctx) if torch_related else ""
        return [failed("undefined-symbols", f"{ctx.member}: " + "; ".join(problems) + "." + hint,
                       "link every library whose symbols you use (and nothing else) with $ORIGIN-relative RUNPATHs; "
                       "build against exactly the torch the wheel pins (a symbol missing from it means another "
                       "torch version's headers); pass --torch-lib DIR to audit against another torch."), *extra]
    counted = ", ".join(f"{n} from {name}" for name, n in sorted(providers.items(), key=lambda p: (-p[1], p[0])))
    total = sum(providers.values())
    summary = (f"{total} undefined symbol(s) resolved ({counted})" if total else "no undefined symbols to resolve")
    if closure:
        summary += "; bound in libraries its NEEDED closure loads (not named in its own DT_NEEDED): " + ", ".join(
            f"{n} from {name}" for name, n in sorted(closure.items()))
    if unchecked:
        summary += f"; {len(unchecked)} not checked"
    return [passed("undefined-symbols", f"{summary}; needed: {'; '.join(resolved) or 'none'}"), *extra]


def check_symbol_versions(ctx: LibraryContext) -> CheckResult:
    policy = ctx.artifact.policy
    ceilings = policy.ceilings(ctx.artifact.arch)
    too_new: list[str] = []
    for file, versions in sorted(ctx.lib.version_needs.items()):
        for version in versions:
            match = _VERSION_RE.match(version)
            if match is None or match[1] not in ceilings:
                continue
            namespace, number = match[1], match[2]
            ceiling = ceilings[namespace]
            if number in ceiling.also:
                continue
            parsed = parse_version(number)
            if parsed is not None and ceiling.max is not None and parsed <= ceiling.max:
                continue
            users = sorted({s.name for s in ctx.lib.dynamic_symbols if not s.defined and s.version == version})
            limit = ".".join(map(str, ceiling.max)) if ceiling.max else "none"
            too_new.append(f"{version} from {file} (newest allowed {namespace}_{limit}; used by {_sample(users)})")
    if too_new:
        return failed("symbol-versions", f"{ctx.member} needs symbol versions newer than {policy.name} allows "
                      f"({ctx.artifact.policy_reason}): " + "; ".join(too_new) + ".",
                      f"build in a {policy.name} image (e.g. quay.io/pypa/{policy.name}_{ctx.artifact.arch}) with "
                      "its own compiler, so the binary only needs what that glibc/libstdc++ provides; or tag the "
                      "wheel for the newer platform with `kiln repair WHEEL -w DIR` (auditwheel repair with "
                      "torch's libraries excluded and torch's floor kept; `kiln wheels` runs it).")
    return passed("symbol-versions", f"within {policy.name} ({ctx.artifact.policy_reason})")
