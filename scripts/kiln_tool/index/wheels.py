"""Read one wheel for the index: its name, bytes, METADATA and build info, all checked.

Everything here is about refusing bad input early and clearly. A wheel's name
ends up in URLs, file names and HTML, and its build info decides which
directory it is listed in, so every field that reaches a path or a page is
checked against a strict pattern before anything is written.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import zipfile
import zlib
from dataclasses import dataclass
from email.errors import MessageError
from pathlib import Path
from typing import Any

from packaging.metadata import parse_email
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from .errors import IndexInputError

# What a wheel file name may contain: PEP 427 names are built from these alone
# (the local version's "+" included), so anything else - "/", "\", "<", '"',
# "&", "%", spaces - is not a wheel we made and must not reach a page or a path.
SAFE_WHEEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*\.whl")
MAX_NAME_LENGTH = 200
CUDA_TAG = re.compile(r"cpu|cu[0-9]{2,4}")
TORCH_MAJOR_MINOR = re.compile(r"[0-9]{1,3}\.[0-9]{1,3}")
PYTHON_TAG = re.compile(r"cp3[0-9]{1,2}(-abi3)?")
ABI_MODES = ("torch", "stable")
REQUIRED_BUILD_INFO = ("opkiln_version", "abi_mode", "torch_major_minor", "cuda_tag", "python_tag")
_CHUNK = 1 << 20


@dataclass(frozen=True)
class WheelInfo:
    """What the index needs to know about one wheel, read from the wheel itself."""

    filename: str
    project: str
    """Normalized project name (PEP 503), e.g. ``opkiln``."""
    version: str
    sha256: str
    size: int
    metadata: bytes
    """The wheel's METADATA file, served as ``<wheel>.metadata`` (PEP 658)."""
    requires_python: str | None
    torch_requirement: str | None
    """The specifier of the wheel's ``torch`` requirement (``>=2.13,<2.14``), if any."""
    abi_mode: str
    cuda_tag: str
    torch_major_minor: str
    python_tag: str
    platforms: tuple[str, ...]

    @property
    def metadata_sha256(self) -> str:
        return hashlib.sha256(self.metadata).hexdigest()


def check_wheel_name(name: str) -> None:
    """Refuse a file name that is not a safe, parsable wheel name."""
    if not name.endswith(".whl"):
        raise IndexInputError(f"{name!r}: not a wheel (only *.whl files belong in the wheel directory)")
    if len(name) > MAX_NAME_LENGTH or not SAFE_WHEEL_NAME.fullmatch(name):
        raise IndexInputError(
            f"{name!r}: wheel name has characters that do not belong in a wheel name "
            "(allowed: letters, digits, '.', '_', '+', '-')"
        )
    try:
        parse_wheel_filename(name)
    except (InvalidWheelFilename, InvalidVersion) as exc:
        raise IndexInputError(f"{name!r}: unparsable wheel name: {exc}") from None


def file_sha256(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def read_wheel(path: Path) -> WheelInfo:
    """Inspect ``path`` and return its :class:`WheelInfo`; :class:`IndexInputError` if unusable."""
    name = path.name
    check_wheel_name(name)
    dist_name, dist_version, _build, tags = parse_wheel_filename(name)
    project = canonicalize_name(dist_name)

    size = path.stat().st_size
    if size <= 1 << 24:
        # Small wheels (the common case, and all 10,000 of the benchmark) are read once.
        data = path.read_bytes()
        sha256 = hashlib.sha256(data).hexdigest()
        size = len(data)
        source: Path | io.BytesIO = io.BytesIO(data)
    else:
        sha256, size = file_sha256(path)
        source = path
    try:
        with zipfile.ZipFile(source) as zf:
            broken = zf.testzip()
            if broken is not None:
                raise IndexInputError(f"{name}: corrupt wheel (bad CRC in {broken!r})")
            members = set(zf.namelist())
            metadata_name = _find_metadata(name, members)
            metadata = zf.read(metadata_name)
            module = project.replace("-", "_")
            info_name = f"{module}/_build_info.json"
            if info_name not in members:
                raise IndexInputError(f"{name}: no {info_name} (not a wheel built by kiln)")
            build_info = _parse_build_info(name, zf.read(info_name))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, OSError, ValueError,
            NotImplementedError) as exc:
        raise IndexInputError(f"{name}: corrupt wheel (not a readable zip: {exc})") from None

    fields = _parse_metadata(name, metadata)
    if canonicalize_name(fields["name"]) != project:
        raise IndexInputError(f"{name}: METADATA names project {fields['name']!r}, the file name {dist_name!r}")
    if Version(fields["version"]) != dist_version:
        raise IndexInputError(f"{name}: METADATA has version {fields['version']}, the file name {dist_version}")
    if build_info["opkiln_version"] != fields["version"]:
        raise IndexInputError(
            f"{name}: build info says version {build_info['opkiln_version']}, METADATA {fields['version']}"
        )
    interpreters = {f"{t.interpreter}-{t.abi}" if t.abi == "abi3" else t.interpreter for t in tags}
    if build_info["python_tag"] not in interpreters:
        raise IndexInputError(
            f"{name}: build info python_tag {build_info['python_tag']!r} does not match the file name's tags "
            f"({', '.join(sorted(interpreters))})"
        )
    return WheelInfo(
        filename=name,
        project=project,
        version=str(dist_version),
        sha256=sha256,
        size=size,
        metadata=metadata,
        requires_python=fields["requires_python"],
        torch_requirement=fields["torch_requirement"],
        abi_mode=build_info["abi_mode"],
        cuda_tag=build_info["cuda_tag"],
        torch_major_minor=build_info["torch_major_minor"],
        python_tag=build_info["python_tag"],
        platforms=tuple(sorted({t.platform for t in tags})),
    )


def _find_metadata(name: str, members: set[str]) -> str:
    candidates = sorted(m for m in members if re.fullmatch(r"[^/]+\.dist-info/METADATA", m))
    if not candidates:
        raise IndexInputError(f"{name}: wheel has no *.dist-info/METADATA")
    if len(candidates) > 1:
        raise IndexInputError(f"{name}: wheel has more than one METADATA ({', '.join(candidates)})")
    return candidates[0]


def _parse_metadata(name: str, raw: bytes) -> dict[str, Any]:
    try:
        parsed, _unparsed = parse_email(raw)
    except (MessageError, UnicodeDecodeError, ValueError) as exc:
        raise IndexInputError(f"{name}: unreadable METADATA: {exc}") from None
    meta_name = parsed.get("name")
    meta_version = parsed.get("version")
    if not meta_name or not meta_version:
        raise IndexInputError(f"{name}: METADATA lacks Name or Version")
    try:
        Version(meta_version)
    except InvalidVersion:
        raise IndexInputError(f"{name}: METADATA has an invalid Version {meta_version!r}") from None
    requires_python = parsed.get("requires_python")
    if requires_python is not None:
        try:
            SpecifierSet(requires_python)
        except InvalidSpecifier:
            raise IndexInputError(f"{name}: METADATA has an invalid Requires-Python {requires_python!r}") from None
    torch_spec: str | None = None
    for line in parsed.get("requires_dist", []):
        try:
            req = Requirement(line)
        except InvalidRequirement:
            raise IndexInputError(f"{name}: METADATA has an invalid Requires-Dist {line!r}") from None
        if canonicalize_name(req.name) == "torch" and req.marker is None:
            torch_spec = str(req.specifier)
    return {"name": meta_name, "version": meta_version, "requires_python": requires_python,
            "torch_requirement": torch_spec}


def _parse_build_info(name: str, raw: bytes) -> dict[str, Any]:
    try:
        info = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise IndexInputError(f"{name}: unreadable build info: {exc}") from None
    if not isinstance(info, dict):
        raise IndexInputError(f"{name}: build info is not a JSON object")
    missing = [key for key in REQUIRED_BUILD_INFO if not isinstance(info.get(key), str)]
    if missing:
        raise IndexInputError(f"{name}: build info lacks {', '.join(missing)}")
    checks = (("cuda_tag", CUDA_TAG), ("torch_major_minor", TORCH_MAJOR_MINOR), ("python_tag", PYTHON_TAG))
    for key, pattern in checks:
        if not pattern.fullmatch(info[key]):
            raise IndexInputError(f"{name}: build info has an invalid {key} {info[key]!r}")
    if info["abi_mode"] not in ABI_MODES:
        raise IndexInputError(f"{name}: build info has an unknown abi_mode {info['abi_mode']!r}")
    return info
