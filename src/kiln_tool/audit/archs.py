"""CUDA architecture names: the TORCH_CUDA_ARCH_LIST syntax and the fatbin's view of them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

from .errors import AuditInputError

_ARCH_RE = re.compile(r"^(\d+)\.(\d+)([af]?)(\+PTX)?$")


@dataclass(frozen=True, order=True)
class CudaArch:
    """One architecture: 9.0a is CudaArch(9, 0, "a"); `sm` and `compute` name its SASS and PTX."""

    major: int
    minor: int
    variant: str = ""  # "", "a" (arch-specific) or "f" (family-specific)

    @property
    def number(self) -> int:
        return self.major * 10 + self.minor

    @property
    def sm(self) -> str:
        return f"sm_{self.number}{self.variant}"

    @property
    def compute(self) -> str:
        return f"compute_{self.number}{self.variant}"

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}{self.variant}"

    @classmethod
    def from_number(cls, number: int, variant: str = "") -> CudaArch:
        return cls(number // 10, number % 10, variant)


@dataclass(frozen=True)
class ArchRequest:
    """What a build asked for, as TORCH_CUDA_ARCH_LIST means it: SASS for every arch, PTX only for
    the archs marked +PTX, and never for an arch-specific (a) or family-specific (f) target, whose
    PTX is not forward compatible (a +PTX on one is recorded in `ignored_ptx`)."""

    sass: tuple[CudaArch, ...]
    ptx: tuple[CudaArch, ...]
    source: str
    ignored_ptx: tuple[CudaArch, ...] = ()

    def describe(self) -> str:
        ptx = ", ".join(a.compute for a in self.ptx) or "none"
        ignored = (f"; +PTX ignored on {', '.join(str(a) for a in self.ignored_ptx)} (arch-specific PTX is not "
                   "forward compatible)") if self.ignored_ptx else ""
        return f"SASS {', '.join(a.sm for a in self.sass)}; PTX {ptx}{ignored} (from {self.source})"


def parse_arch_list(spec: str | list[str] | tuple[str, ...], source: str) -> ArchRequest:
    """Parse "8.0;9.0a;12.0+PTX" (";", "," or spaces between items) or a list of such items."""
    items = spec if isinstance(spec, list | tuple) else re.split(r"[;,\s]+", spec)
    sass: list[CudaArch] = []
    marked_ptx: list[CudaArch] = []
    ignored: list[CudaArch] = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        match = _ARCH_RE.match(item)
        if match is None:
            raise AuditInputError(f"{source}: '{item}' is not a CUDA arch (expected e.g. 8.0, 9.0a, 12.0+PTX)")
        arch = CudaArch(int(match[1]), int(match[2]), match[3])
        if arch not in sass:
            sass.append(arch)
        if match[4]:
            target = ignored if arch.variant else marked_ptx
            if arch not in target:
                target.append(arch)
    if not sass:
        raise AuditInputError(f"{source}: the CUDA arch list is empty")
    return ArchRequest(tuple(sorted(sass)), tuple(sorted(marked_ptx)), source, tuple(sorted(ignored)))


def parse_gpu(text: str) -> CudaArch:
    """--gpu: "sm_90", "sm_120", "9.0" -> the GPU's compute capability."""
    match = re.fullmatch(r"(?:sm_)?(\d+)(?:\.(\d))?", text.strip())
    if match is None:
        raise AuditInputError(f"--gpu {text!r}: expected a compute capability such as sm_90 or 8.6")
    if match[2] is not None:
        return CudaArch(int(match[1]), int(match[2]))
    return CudaArch.from_number(int(match[1]))


def sass_runs_on(cubin: CudaArch, gpu: CudaArch) -> bool:
    """A cubin runs on GPUs of its major at or above its minor; an 'a' cubin only on its own arch;
    an 'f' cubin on its family (same major, minor at or above)."""
    if cubin.variant == "a":
        return (cubin.major, cubin.minor) == (gpu.major, gpu.minor)
    return cubin.major == gpu.major and cubin.minor <= gpu.minor


def ptx_runs_on(ptx: CudaArch, gpu: CudaArch) -> bool:
    """Plain PTX JITs on any GPU at or above it; 'a' PTX only on its own arch; 'f' PTX on its family."""
    if ptx.variant == "a":
        return (ptx.major, ptx.minor) == (gpu.major, gpu.minor)
    if ptx.variant == "f":
        return ptx.major == gpu.major and ptx.minor <= gpu.minor
    return ptx.number <= gpu.number


def why_not_covering(found: CudaArch, wanted: CudaArch) -> str:
    """Why PTX `found` is not the PTX `wanted` that a +PTX asked for."""
    if found.variant == "a":
        return f"{found.compute} is arch-specific: it JITs only on {found.major}.{found.minor}, never forward"
    if found.variant == "f":
        return f"{found.compute} is family-specific: it JITs only within CC {found.major}.x, never forward"
    if found.number > wanted.number:
        return f"{found.compute} is newer than {wanted}: a {wanted} GPU cannot JIT it"
    return (f"{found.compute} is older: it JITs on newer GPUs but cannot use {wanted}'s instructions, so it is "
            f"not the {wanted} PTX asked for")


def gpu_runs(manifest: ArchManifestLike, gpu: CudaArch) -> tuple[bool, str]:
    """Whether a GPU can run a library's device code, and how (or why not)."""
    sass = [a for a in manifest.sass if sass_runs_on(a, gpu)]
    if sass:
        best = max(sass)
        if best.number == gpu.number:
            exact = "for it" + (f", arch-specific {best.sm}" if best.variant == "a" else
                                f", family-specific {best.sm}" if best.variant == "f" else "")
        else:
            exact = f"binary compatible: same major {gpu.major}, {best.major}.{best.minor} <= {gpu.major}.{gpu.minor}"
        return True, f"SASS {best.sm} ({exact})"
    ptx = [a for a in manifest.ptx if ptx_runs_on(a, gpu)]
    if ptx:
        best = max(ptx, key=lambda a: a.number)
        return True, f"no SASS for it; the driver JITs PTX {best.compute} (at or below {gpu.sm}) at first use"
    reasons = []
    for a in manifest.sass:
        if a.variant == "a":
            reasons.append(f"{a.sm} is arch-specific to {a.major}.{a.minor}")
        elif a.number > gpu.number:
            reasons.append(f"{a.sm} is newer than {gpu.major}.{gpu.minor}")
        else:
            reasons.append(f"{a.sm} is for major {a.major} (SASS runs only within its major)")
    for a in manifest.ptx:
        reasons.append(why_not_covering(a, gpu) if a.variant or a.number > gpu.number else f"{a.compute} unusable")
    return False, "no SASS it can run and no PTX at or below it" + (f" ({'; '.join(reasons)})" if reasons else
                                                                     " (no device code)")


class ArchManifestLike(Protocol):
    @property
    def sass(self) -> tuple[CudaArch, ...]: ...

    @property
    def ptx(self) -> tuple[CudaArch, ...]: ...
