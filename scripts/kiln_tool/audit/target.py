"""The torch an artifact targets: found from --torch-lib, the build info or the wheel's torch pin.

Torch is never imported: its version comes from torch/version.py and its manylinux floor from
its own dist-info WHEEL file.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from .errors import AuditInputError

REPO = Path(__file__).resolve().parents[3]
_VERSION_RE = re.compile(r"""^__version__\s*=\s*['"]([^'"]+)['"]""", re.MULTILINE)
_TORCH_REQ_RE = re.compile(r"^torch\s*(?:\((?P<paren>[^)]*)\)|(?P<bare>[^;]*))", re.IGNORECASE)


@dataclass(frozen=True)
class TorchTarget:
    version: str  # 2.13.0+cpu
    lib_dir: Path  # .../site-packages/torch/lib
    source: str  # how it was chosen, for the report

    @property
    def site_dir(self) -> Path:
        return self.lib_dir.parent.parent

    @property
    def public_version(self) -> str:
        return self.version.split("+")[0]

    def platform_tags(self) -> list[str]:
        """Platform tags of torch's own wheel (its manylinux floor), from its dist-info WHEEL."""
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


def candidate_lib_dirs() -> list[Path]:
    """torch/lib of the running interpreter, then of the repo's venvs (.venv, .venvs/*)."""
    roots = [Path(p) for p in sys.path if p.endswith("site-packages")]
    roots += sorted(REPO.glob(".venv/lib/python*/site-packages"))
    roots += sorted(REPO.glob(".venvs/*/lib/python*/site-packages"))
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


def find_torch(build_info_version: str | None, requirement: str | None) -> tuple[TorchTarget | None, str]:
    """The installed torch matching the build info's exact version, else the wheel's torch pin.

    Returns (target or None, an explanation of what was looked for).
    """
    candidates = [(lib, torch_version_at(lib)) for lib in candidate_lib_dirs()]
    found = ", ".join(f"{v} ({lib})" for lib, v in candidates) or "none"
    if build_info_version:
        for lib, version in candidates:
            if version == build_info_version:
                return TorchTarget(version, lib, "build info torch_version"), ""
        return None, f"torch {build_info_version} (from the build info); installed here: {found}"
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
        if matching:
            _, lib, version = max(matching, key=lambda m: m[0])
            return TorchTarget(version, lib, f"METADATA requires torch{requirement}"), ""
        return None, f"torch{requirement} (from METADATA); installed here: {found}"
    return None, "no --torch-lib, no build info and no torch requirement"
