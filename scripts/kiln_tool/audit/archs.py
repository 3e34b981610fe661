"""CUDA architecture names: the TORCH_CUDA_ARCH_LIST syntax and the fatbin's view of them."""

from __future__ import annotations

import re
from dataclasses import dataclass

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
    """What a build asked for: SASS for every arch, PTX for the newest and for each marked +PTX."""

    sass: tuple[CudaArch, ...]
    ptx: tuple[CudaArch, ...]
    source: str

    def describe(self) -> str:
        return (f"SASS {', '.join(a.sm for a in self.sass)}; PTX {', '.join(a.compute for a in self.ptx)} "
                f"(from {self.source})")


def parse_arch_list(spec: str | list[str] | tuple[str, ...], source: str) -> ArchRequest:
    """Parse "8.0;9.0a;12.0+PTX" (";", "," or spaces between items) or a list of such items."""
    items = spec if isinstance(spec, list | tuple) else re.split(r"[;,\s]+", spec)
    sass: list[CudaArch] = []
    marked_ptx: list[CudaArch] = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        match = _ARCH_RE.match(item)
        if match is None:
            raise AuditInputError(f"{source}: '{item}' is not a CUDA arch (expected e.g. 8.0, 9.0a, 12.0+PTX)")
        arch = CudaArch(int(match[1]), int(match[2]), match[3])
        if arch not in sass:
            sass.append(arch)
        if match[4] and arch not in marked_ptx:
            marked_ptx.append(arch)
    if not sass:
        raise AuditInputError(f"{source}: the CUDA arch list is empty")
    newest = max(sass, key=lambda a: (a.number, a.variant))
    ptx = sorted({newest, *marked_ptx})
    return ArchRequest(tuple(sorted(sass)), tuple(ptx), source)
