"""The torch an artifact targets: found from --torch-lib, the build info or the wheel's torch pin.

Torch is never imported: its version comes from torch/version.py and its manylinux floor from
its own dist-info WHEEL file.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from .elf import file_arch
from .errors import AuditInputError
from .torch_abi import (
    DEFAULT_ARCH,
    RecordedTorch,
    load_recorded,
    record_arch,
    recorded_archs,
    recorded_versions,
)

_VERSION_RE = re.compile(r"""^__version__\s*=\s*['"]([^'"]+)['"]""", re.MULTILINE)
_TORCH_REQ_RE = re.compile(r"^torch\s*(?:\((?P<paren>[^)]*)\)|(?P<bare>[^;]*))", re.IGNORECASE)


class TorchTarget(NamedTuple):
    version: str  # 2.13.0+cpu
    lib_dir: Path | None  # .../site-packages/torch/lib; None for a recorded torch
    source: str  # how it was chosen, for the report
    recorded: RecordedTorch | None = None  # data/torch_abi's record, when torch is not installed here

    @property
    def site_dir(self) -> Path | None:
        return self.lib_dir.parent.parent if self.lib_dir is not None else None

    def describe(self) -> str:
        if self.recorded is not None:
            return (f"{self.version} as recorded in {self.recorded.data_file.parent.name}/"
                    f"{self.recorded.data_file.name} ({self.source}; not installed here)")
        return f"{self.version} at {self.lib_dir} ({self.source})"

    @property
    def arch(self) -> str | None:
        """The processor this torch is built for (None: unknown)."""
        if self.recorded is not None:
            return record_arch(self.recorded.platform_tags)
        return torch_arch(self.lib_dir) if self.lib_dir is not None else None

    @property
    def public_version(self) -> str:
        return self.version.split("+")[0]

    def platform_tags(self) -> list[str]:
        """Platform tags of torch's own wheel (its manylinux floor), from its dist-info WHEEL."""
        if self.recorded is not None:
            return list(self.recorded.platform_tags)
        if self.site_dir is None:
            return []
        for wheel_file in sorted(self.site_dir.glob("torch-*.dist-info/WHEEL")):
            tags = re.findall(r"^Tag:\s*\S+?-\S+?-(\S+)\s*$", wheel_file.read_text(errors="replace"), re.MULTILINE)
            return [t for tag in tags for t in tag.split(".")]
        return []


def torch_version_at(lib_dir: Path) -> str | None:
    version_py = lib_dir.parent / "version.py"
    try:
        match = _VERSION_RE.search(version_py.read_text(errors="replace"))
    except OSError:
        return None
    return match[1] if match else None


def from_torch_lib(lib_dir: Path) -> TorchTarget:
    lib_dir = lib_dir.resolve()
    if not lib_dir.is_dir():
        raise AuditInputError(f"--torch-lib {lib_dir}: not a directory")
    if not (lib_dir / "libc10.so").is_file():
        raise AuditInputError(f"--torch-lib {lib_dir}: no libc10.so there; pass torch's lib directory "
                              "(site-packages/torch/lib)")
    return TorchTarget(torch_version_at(lib_dir) or "unknown", lib_dir, "--torch-lib")


SEARCH_ENV = "KILN_AUDIT_TORCH_SEARCH"  # "interpreter": only this interpreter's torch (as in the release job)


def candidate_lib_dirs() -> list[Path]:
    """torch/lib of the running interpreter, then of the project's venvs (.venv, and the build venvs .venvs/*
    kiln wheels makes), the project being the one kiln serves (kiln_tool.project.project_dir)."""
    from ..project import project_dir

    roots = [Path(p) for p in sys.path if p.endswith("site-packages")]
    if os.environ.get(SEARCH_ENV) != "interpreter":
        project = project_dir()
        roots += sorted(project.glob(".venv/lib/python*/site-packages"))
        roots += sorted(project.glob(".venvs/*/lib/python*/site-packages"))
    seen: list[Path] = []
    for root in roots:
        lib = (root / "torch" / "lib").resolve() if (root / "torch" / "lib").is_dir() else None
        if lib is not None and lib not in seen and (lib / "libc10.so").is_file():
            seen.append(lib)
    return seen


def torch_requirement(requires_dist: list[str]) -> str | None:
    """The version specifier of a wheel's torch requirement ('==2.13.0', '>=2.14.0'), if any."""
    for requirement in requires_dist:
        if ";" in requirement and "extra" in requirement.split(";", 1)[1]:
            continue
        match = _TORCH_REQ_RE.match(requirement.strip())
        if match is None:
            continue
        spec = (match["paren"] or match["bare"] or "").strip()
        if spec.startswith(("-", "_")) or (spec and spec[0] not in "=<>!~,"):
            continue  # torch-foo, torchvision: another project
        return spec.replace(" ", "")
    return None


def _recorded(version: str, source: str, arch: str = DEFAULT_ARCH) -> TorchTarget | None:
    record = load_recorded(version, arch)
    return TorchTarget(version, None, source, record) if record is not None else None


def _variant_rank(version: str, prefer_cuda: bool | None, local_hint: str | None) -> tuple[int, int]:
    local = version.partition("+")[2]
    hinted = 1 if local_hint and local and local in local_hint else 0
    cuda = local.startswith("cu") or local == ""  # PyPI's default torch is a CUDA build
    return hinted, 1 if prefer_cuda is None or cuda == prefer_cuda else 0


def _recorded_for_spec(spec: object, prefer_cuda: bool | None, local_hint: str | None,
                       source: str, arch: str = DEFAULT_ARCH) -> TorchTarget | None:
    from packaging.version import InvalidVersion, Version

    matching = []
    for version in recorded_versions(arch):
        try:
            parsed = Version(version)
        except InvalidVersion:
            continue
        if spec.contains(parsed.public, prereleases=True):  # type: ignore[attr-defined]
            matching.append(((parsed.release, *_variant_rank(version, prefer_cuda, local_hint)), version))
    if not matching:
        return None
    return _recorded(max(matching)[1], source, arch)


def recorded_summary(arch: str = DEFAULT_ARCH) -> str:
    """The versions recorded for `arch`; and, when that is none, what is recorded for other processors."""
    archs = recorded_archs()
    mine = ", ".join(archs.get(arch, [])) or "none"
    if arch in archs:
        return mine
    others = "; ".join(f"{a}: {', '.join(v)}" for a, v in sorted(archs.items()))
    return f"none for {arch}" + (f"; only for other processors ({others})" if others else "")


def torch_arch(lib_dir: Path) -> str | None:
    """The processor an installed torch is built for (its libc10.so's ELF header)."""
    return file_arch(lib_dir / "libc10.so")


def find_torch(build_info_version: str | None, requirement: str | None, *,
               prefer_cuda: Callable[[], bool] | None = None,
               local_hint: str | None = None,
               source: str = "build info torch_version", arch: str = DEFAULT_ARCH) -> tuple[TorchTarget | None, str]:
    """The installed torch matching the build info's exact version, else the wheel's torch pin; when
    none is installed, the recorded ABI of that torch (data/torch_abi). Only a torch of `arch` (the wheel's
    processor) is a target: an installed torch of another processor and its records are never used.

    prefer_cuda / local_hint choose among recorded variants of one release (a wheel that needs
    libtorch_cuda.so, a wheel whose local version names cu130). Returns (target or None, an
    explanation of what was looked for).
    """
    candidates = [(lib, torch_version_at(lib)) for lib in candidate_lib_dirs() if torch_arch(lib) in (arch, None)]
    found = ", ".join(f"{v} ({lib})" for lib, v in candidates) or (
        "none" if arch == DEFAULT_ARCH else f"none for {arch}")
    if build_info_version:
        for lib, version in candidates:
            if version == build_info_version:
                return TorchTarget(version, lib, source), ""
        recorded = _recorded(build_info_version, source, arch)
        if recorded is not None:
            return recorded, ""
        return None, (f"torch {build_info_version} ({source}) is neither installed here ({found}) nor "
                      f"recorded in data/torch_abi (recorded: {recorded_summary(arch)})")
    if requirement is not None:  # "" (a bare `torch`) allows any version
        from packaging.specifiers import InvalidSpecifier, SpecifierSet
        from packaging.version import InvalidVersion, Version

        try:
            spec = SpecifierSet(requirement)
        except InvalidSpecifier:
            return None, f"torch{requirement} (unparsable requirement)"
        matching = []
        for lib, version in candidates:
            try:
                if version and spec.contains(Version(version).public, prereleases=True):
                    matching.append((Version(version), lib, version))
            except InvalidVersion:
                continue
        wants_cuda = prefer_cuda() if prefer_cuda is not None else None
        source = f"METADATA requires torch{requirement}"
        fallback = max(matching, key=lambda m: m[0]) if matching else None
        if wants_cuda:
            # A library needing libtorch_cuda.so is audited against a CUDA build of torch: an installed CPU
            # build would only say that torch's CUDA libraries are missing.
            matching = [m for m in matching if (m[1] / "libtorch_cuda.so").is_file()]
            source += "; a library needs libtorch_cuda.so"
        if matching:
            _, lib, version = max(matching, key=lambda m: m[0])
            return TorchTarget(version, lib, source), ""
        recorded = _recorded_for_spec(spec, wants_cuda, local_hint, source, arch)
        if recorded is not None and (not wants_cuda or recorded.recorded is None
                                     or any(p.endswith("/libtorch_cuda.so") for p in recorded.recorded.libraries)):
            return recorded, ""
        if fallback is not None:
            _, lib, version = fallback
            return TorchTarget(version, lib, f"METADATA requires torch{requirement}; no CUDA build of it is "
                               "installed or recorded"), ""
        if recorded is not None:
            return recorded, ""
        return None, (f"torch{requirement} (from METADATA) is neither installed here ({found}) nor recorded in "
                      f"data/torch_abi (recorded: {recorded_summary(arch)})")
    return None, "no --torch-lib, no build info and no torch requirement"
