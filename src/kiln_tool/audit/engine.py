"""audit_paths: open each artifact, run every check on every shared library, collect a report."""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from . import inputs, loading
from .checks import abi, build_paths, exports, hardening, registration, symbols, wheel
from .context import ArtifactContext, LibraryContext, ReleaseRule
from .elf import CORRUPT_ELF_ERRORS, ElfInvalid, ElfLibrary
from .errors import AuditInputError
from .policy import (
    DEFAULT_POLICY,
    Policy,
    available_policies,
    glibc_of_policy_name,
    load_policy,
    manylinux_policy_of_tag,
)
from .report import ArtifactReport, AuditReport, CheckResult, LibraryReport, failed, passed
from .resolve import Location, Resolver, host_arch
from .target import find_torch, from_torch_lib, torch_requirement

if TYPE_CHECKING:
    from .archs import ArchRequest

# DT_NEEDED of a library that needs a CUDA build of torch: choose a CUDA variant of torch for it.
_CUDA_TORCH_NEEDED = ("libtorch_cuda.so", "libc10_cuda.so")


@dataclass(frozen=True)
class AuditOptions:
    """How to audit. torch_lib: the target torch's lib dir (default: from the build info or the wheel's torch
    pin); cuda_archs: TORCH_CUDA_ARCH_LIST syntax (default: the build info's); policy: the manylinux policy for
    artifacts whose tag makes no manylinux claim, and the platform floor when torch's own is unknown."""

    torch_lib: Path | None = None
    cuda_archs: str | None = None
    policy: str = DEFAULT_POLICY
    extra_exports: tuple[str, ...] = ()
    gpu: str | None = None  # "sm_90": say whether that GPU can run each library's device code
    torch_version: str | None = None  # audit against this torch (installed or recorded), e.g. "2.14.1+cu130"
    release: ReleaseRule | None = None  # --release: tagged at the release floor (or the stand-in's one tag)
    fetch_dependencies: bool = False  # download uninstalled declared dependencies' wheels and read their files


def _arch_list(value: str | list[str], source: str) -> ArchRequest:
    """archs.parse_arch_list, imported for the artifacts that name CUDA archs (a CPU wheel never does)."""
    from .archs import parse_arch_list

    return parse_arch_list(value, source)


def _host_arch() -> str:
    return host_arch()


def _policy_for_claim(name: str) -> Policy:
    """The policy file for a manylinux claim, or the newest one at or below it."""
    if name in available_policies():
        return load_policy(name)
    wanted = glibc_of_policy_name(name)
    below = [(g, p) for p in available_policies() if (g := glibc_of_policy_name(p)) and wanted and g <= wanted]
    if not below:
        raise AuditInputError(f"no audit policy at or below {name} (known: {', '.join(available_policies())})")
    return load_policy(max(below)[1])


@cache
def _torch_cxx11_abi(lib_dir: Path) -> bool | None:
    try:
        libc10 = ElfLibrary.open(lib_dir / "libc10.so")
    except (ElfInvalid, OSError):
        return None
    try:
        names = [s.name for s in libc10.dynamic_symbols if s.defined]
    finally:
        libc10.close()
    if any("__cxx11" in n for n in names):
        return True
    return False if any("basic_string" in n or "Ss" in n for n in names) else None


def _cxx11_target(artifact: ArtifactContext) -> tuple[bool | None, str]:
    info = artifact.build_info
    if info is not None and isinstance(info.get("cxx11_abi"), bool):
        return bool(info["cxx11_abi"]), "build info"
    if artifact.torch is not None and artifact.torch.recorded is not None:
        return artifact.torch.recorded.cxx11_abi, f"torch {artifact.torch.version}'s recorded libc10.so"
    if artifact.torch is not None and artifact.torch.lib_dir is not None:
        return _torch_cxx11_abi(artifact.torch.lib_dir), f"torch {artifact.torch.version}'s libc10.so"
    return None, artifact.torch_problem or "no target torch"


def _check_library(ctx: LibraryContext, report: LibraryReport) -> None:
    checks = report.checks
    program = ctx.lib.is_executable  # a program: nothing loads it into a process, nothing binds to its exports
    checks.append(hardening.check_textrel(ctx))
    checks.append(hardening.check_exec_stack(ctx))
    if not program:
        checks.append(exports.check_exports(ctx))
    checks.append(hardening.check_rpath(ctx))
    ctx.lib.release()  # each check's mapped pages go before the next: peak RSS is one check's, not all of them
    checks.extend(build_paths.check_build_paths(ctx))
    ctx.lib.release()
    checks.extend(symbols.check_undefined_symbols(ctx))
    checks.append(symbols.check_symbol_versions(ctx))
    target_abi, source = _cxx11_target(ctx.artifact)
    checks.append(abi.check_cxx11_abi(ctx, target_abi, source))
    ctx.lib.release()
    fatbin_data = ctx.lib.section_view(".nv_fatbin")
    if fatbin_data is not None:
        from .archs import gpu_runs  # a CUDA library's checks: no other library loads them
        from .checks import cuda

        results, manifest = cuda.check_cuda(ctx, fatbin_data)
        checks.extend(results)
        if manifest is not None:
            report.cuda_manifest = manifest.to_json()
            gpu = ctx.artifact.gpu
            if gpu is not None:
                runs, how = gpu_runs(manifest, gpu)
                report.gpu = {"gpu": gpu.sm, "runs": runs, "how": how}
    registered = registration.check_library(ctx) if not program else None
    if registered is not None:
        checks.append(registered)


# The name a copy shares with its original: without auditwheel's -<8 hex> graft suffix and the .so version.
_COPY_STEM = re.compile(r"^(?P<stem>.+?)(?:-[0-9a-f]{8})?(?:\.so(?:\.[0-9]+)*)?$")


def _copies(whl: inputs.Wheel, members: list[str]) -> dict[str, list[str]]:
    """ELF files shipped under several names with identical bytes in one folder (x.so, x.so.0, x.so.0.6.0 where a
    symlink would be on disk; libx.so.1 beside auditwheel's libx-1a2b3c4d.so.1): the longest name ->
    the others. Each is audited once. (In another folder a copy is audited on its own: its $ORIGIN differs.)"""
    groups: dict[tuple[str, str, bytes], list[str]] = {}
    for member in members:
        match = _COPY_STEM.match(posixpath.basename(member))
        stem = match["stem"] if match else posixpath.basename(member)
        digest, _ = whl.digest(member, "sha256")
        groups.setdefault((posixpath.dirname(member), stem, digest), []).append(member)
    result = {}
    for names in groups.values():
        if len(names) > 1:
            canonical = max(names, key=lambda n: (len(n), n))
            result[canonical] = sorted(n for n in names if n != canonical)
    return result


def _elf_valid(report: LibraryReport, exc: ElfInvalid, member: str) -> None:
    report.checks.append(failed("elf-valid", f"{member}: {exc}.",
                                "ship only complete shared objects built for the wheel's platform; rebuild, and check "
                                "no step (strip, copy, download) truncated or replaced the file."))


def _audit_libraries(artifact: ArtifactContext, members: list[tuple[str, Location, Path]],
                     opened: dict[str, ElfLibrary], report: ArtifactReport) -> None:
    for member, location, file in members:
        lib_report = LibraryReport(path=member)
        report.libraries.append(lib_report)
        program = member in artifact.executables
        try:
            lib = opened[member] if member in opened else ElfLibrary.open(file, expect_machine=artifact.arch,
                                                                            where=member, executable=program)
        except ElfInvalid as exc:
            if program and str(exc).startswith("no dynamic section: a statically linked program"):
                lib_report.checks.append(passed("elf-valid", f"{member}: a statically linked program: no "
                                                "libraries to load, nothing to resolve"))
                continue
            _elf_valid(lib_report, exc, member)
            continue
        except OSError as exc:
            raise AuditInputError(f"{member}: cannot read ({exc.strerror or exc})") from exc
        opened[member] = lib
        lib_report.checks.append(_passed_elf(lib))
        ctx = LibraryContext(member=member, location=location, lib=lib, data=lib.buffer, artifact=artifact)
        try:
            _check_library(ctx, lib_report)
        except CORRUPT_ELF_ERRORS as exc:
            # A structure pyelftools reads lazily (version tables, symbols, notes) is damaged: offsets or
            # sizes out of range surface as ValueError/OverflowError there. Judged, never the catch-all.
            lib_report.checks = []
            lib_report.cuda_manifest = None
            _elf_valid(lib_report, ElfInvalid(f"corrupt ELF: {exc}"), member)
            continue
        finally:
            lib.release()  # what the checks read goes from memory; it is read again if needed
        artifact.libraries.append(ctx)


def _apply_severity(report: ArtifactReport, policy: Policy) -> None:
    """Each failed result gets the severity the policy data gives its check (and finding)."""

    def judged(results: list[CheckResult]) -> list[CheckResult]:
        results = [r if r.ok else replace(r, severity=policy.severity_of(r.id, r.finding)) for r in results]
        # One check of one library is never both an ERROR and ok in one report: its pass texts go.
        errors = {r.id for r in results if not r.ok and r.severity == "error"}
        return [r for r in results if not (r.ok and r.id in errors)]

    report.checks = judged(report.checks)
    for lib in report.libraries:
        lib.checks = judged(lib.checks)


def _passed_elf(lib: ElfLibrary) -> CheckResult:
    kind = "executable (audited as a program: its RUNPATH must reach what it needs)" if lib.is_executable \
        else "shared object"
    return passed("elf-valid", f"{lib.elfclass}-bit {lib.machine} {kind}, {lib.size} bytes")


def _target_summary(artifact: ArtifactContext) -> dict[str, object]:
    return {
        "policy": f"{artifact.policy.name} ({artifact.policy_reason})",
        "torch": artifact.torch.describe() if artifact.torch else f"not found: {artifact.torch_problem}",
        "cuda_archs": artifact.archs.describe() if artifact.archs else None,
    }


class _Auditor:
    def __init__(self, options: AuditOptions) -> None:
        self.options = options
        self.base = load_policy(options.policy)
        self.archs = _arch_list(options.cuda_archs, "--cuda-archs") if options.cuda_archs else None
        self.torch = from_torch_lib(Path(options.torch_lib)) if options.torch_lib else None
        if self.torch is None and options.torch_version:
            self.torch, problem = find_torch(options.torch_version, None, source="--torch")
            if self.torch is None:
                raise AuditInputError(f"--torch {options.torch_version}: {problem}")
        self.gpu = None
        if options.gpu:
            from .archs import parse_gpu

            self.gpu = parse_gpu(options.gpu)

    def audit_wheel(self, path: Path) -> ArtifactReport:
        whl = inputs.open_wheel(path, self.base.limits)
        resolver: Resolver | None = None
        opened: dict[str, ElfLibrary] = {}
        try:
            platform_tags = whl.name.platform_tags
            claims = [(*c, t) for t in platform_tags if (c := manylinux_policy_of_tag(t))]
            arch = next((c[1] for c in claims), None)
            if arch is None:
                arch = next((t.split("_", 1)[1] for t in platform_tags if t.startswith("linux_")), _host_arch())
            if claims:
                lowest = min(claims, key=lambda c: glibc_of_policy_name(c[0]) or (0, 0))
                policy = _policy_for_claim(lowest[0])
                written = lowest[2]  # as the file name writes it: manylinux2014_x86_64, not its alias
                reason = f"the wheel's tag {written}" + (f" (= {lowest[0]}_{lowest[1]})"
                                                          if written != f"{lowest[0]}_{lowest[1]}" else "")
            else:
                policy, reason = self.base, f"--policy; tag {'.'.join(platform_tags)} claims no manylinux policy"
            info = whl.build_info()
            programs = set(whl.executables())
            members = [(m, Location(member=m), whl.library_file(m)) for m in sorted({*whl.libraries(), *programs})]
            copies = _copies(whl, [m for m, _, _ in members])
            members = [entry for entry in members if entry[0] not in {c for cs in copies.values() for c in cs}]

            def open_member(member: str) -> ElfLibrary:
                if member not in opened:
                    opened[member] = ElfLibrary.open(whl.library_file(member), expect_machine=arch, where=member,
                                                     executable=member in programs)
                return opened[member]

            def needs_cuda_torch() -> bool:
                for member, _, _ in members:
                    try:
                        needed = open_member(member).needed
                    except (ElfInvalid, OSError, *CORRUPT_ELF_ERRORS):
                        continue
                    if any(n in _CUDA_TORCH_NEEDED for n in needed):
                        return True
                return False

            torch, problem = self.torch, ""
            if torch is not None and torch.arch not in (arch, None):
                if self.options.torch_version:  # the same release, recorded for the wheel's processor
                    torch, problem = find_torch(self.options.torch_version, None, source="--torch", arch=arch)
                else:
                    problem = f"--torch-lib {torch.lib_dir} is a torch for {torch.arch}, the wheel is for {arch}"
                    torch = None
            elif torch is None:
                requirement = torch_requirement(whl.metadata().get("Requires-Dist", []))
                torch_version = str(info["torch_version"]) if info and info.get("torch_version") else None
                torch, problem = find_torch(torch_version, requirement, prefer_cuda=needs_cuda_torch,
                                            local_hint=whl.name.version.partition("+")[2] or None, arch=arch)
                if torch is None:
                    problem += "; pass --torch-lib DIR" if arch == _host_arch() else (
                        f"; record that torch's {arch} wheel (`scripts/kiln torch-abi` of it; `kiln release` "
                        "records it itself)")
            archs = self.archs
            if archs is None and info and info.get("cuda_archs"):
                archs = _arch_list(list(info["cuda_archs"]), "build info cuda_archs")

            resolver = Resolver(set(whl.infos), open_member, torch, policy, arch)
            artifact = ArtifactContext(label=str(path), wheel=whl, build_info=info, policy=policy,
                                       policy_reason=reason, base_policy=self.base, arch=arch, torch=torch,
                                       torch_problem=problem, archs=archs, resolver=resolver,
                                       extra_exports=self.options.extra_exports, gpu=self.gpu,
                                       release=self.options.release)
            artifact.requires = tuple(whl.metadata().get("Requires-Dist", []))
            if self.options.fetch_dependencies and artifact.uninstalled_dependencies():
                from .dependencies import fetch

                artifact.fetched = fetch(artifact.uninstalled_dependencies(), arch, whl.name.python_tags[0],
                                         list(whl.name.platform_tags))
            artifact.executables = programs
            python_files = {m: whl.read(m) for m in whl.infos if m.endswith(".py")}
            artifact.loaded_by_name = loading.loaded_by_name(python_files, [m for m, _, _ in members])
            link_files = {m: whl.read(m) for m in whl.infos if m.endswith((".cmake", ".pc", "CMakeLists.txt"))}
            artifact.api = loading.api_evidence({**python_files, **link_files}, sorted(whl.infos))

            def needed_of(member: str) -> list[str]:
                try:
                    return open_member(member).needed
                except (ElfInvalid, OSError, *CORRUPT_ELF_ERRORS):
                    return []

            artifact.variants = loading.variants([m for m, _, _ in members], needed_of)
            for member, _, _ in members:
                for name in needed_of(member):
                    artifact.needed_by.setdefault(name, []).append(member)
            report = ArtifactReport(path=str(path), kind="wheel", target=_target_summary(artifact))
            _audit_libraries(artifact, members, opened, report)
            for lib_report in report.libraries:
                lib_report.copies = copies.get(lib_report.path, [])
            self._wheel_checks(artifact, report)
            _apply_severity(report, policy)
            return report
        finally:
            if resolver is not None:
                resolver.close()
            for lib in opened.values():
                lib.close()
            whl.close()

    def _wheel_checks(self, artifact: ArtifactContext, report: ArtifactReport) -> None:
        assert artifact.wheel is not None
        registered = registration.check_wheel(artifact)
        if registered is not None:
            report.checks.append(registered)
        if artifact.archs is not None and artifact.build_info and artifact.build_info.get("cuda") and not any(
                lib.cuda_manifest is not None for lib in report.libraries):
            report.checks.append(failed(
                "cuda-sass", f"the build info says CUDA {artifact.build_info.get('cuda')} with archs "
                f"{artifact.archs.describe()}, but no library in the wheel carries device code (.nv_fatbin).",
                "check that the CUDA sources were compiled into the extension (KILN_VARIANT=cuda)."))
        report.checks.extend(wheel.check_wheel_tag(artifact))
        report.checks.append(wheel.check_record(artifact.wheel))

    def audit_library(self, path: Path) -> ArtifactReport:
        arch = _host_arch()
        torch = self.torch
        problem = "" if torch else "a loose library has no build info: pass --torch-lib DIR"
        location = Location(path=path.resolve())
        opened: dict[str, ElfLibrary] = {}

        def open_member(member: str) -> ElfLibrary:
            raise KeyError(member)

        resolver = Resolver(set(), open_member, torch, self.base, arch)
        artifact = ArtifactContext(label=str(path), wheel=None, build_info=None, policy=self.base,
                                   policy_reason="--policy", base_policy=self.base, arch=arch, torch=torch,
                                   torch_problem=problem, archs=self.archs, resolver=resolver,
                                   extra_exports=self.options.extra_exports, gpu=self.gpu)
        report = ArtifactReport(path=str(path), kind="library", target=_target_summary(artifact))
        try:
            _audit_libraries(artifact, [(str(path), location, path)], opened, report)
        finally:
            resolver.close()
            for lib in opened.values():
                lib.close()
        _apply_severity(report, self.base)
        return report


def _classify(path: Path, auditor: _Auditor) -> str:
    inputs.check_input_path(path, auditor.base.limits)
    if path.suffix == ".whl":
        return "wheel"
    if inputs.is_zip(path):
        raise AuditInputError(f"{path}: a zip archive that is not named like a wheel (*.whl)")
    if path.stat().st_size == 0 or inputs.is_elf(path):
        return "library"
    raise AuditInputError(f"{path}: not an ELF file (and not a wheel); pass wheels or shared libraries")


def audit_paths(paths: list[Path], options: AuditOptions | None = None) -> AuditReport:
    """Audit wheels and loose shared libraries. Raises AuditInputError for input that cannot be audited."""
    options = options or AuditOptions()
    if not paths:
        raise AuditInputError("nothing to audit: pass at least one wheel or shared library")
    auditor = _Auditor(options)
    try:
        kinds = [(Path(p), _classify(Path(p), auditor)) for p in paths]
    except OSError as exc:
        raise AuditInputError(f"{exc.filename or paths}: cannot read ({exc.strerror or exc})") from exc
    report = AuditReport()
    for path, kind in kinds:
        report.artifacts.append(auditor.audit_wheel(path) if kind == "wheel" else auditor.audit_library(path))
    return report

