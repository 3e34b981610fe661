"""Read one wheel for the index: its name, bytes, METADATA and build info, all checked.

Everything here is about refusing bad input early and clearly. A wheel's name
ends up in URLs, file names and HTML, and its build info decides which
directory it is listed in, so every field that reaches a path or a page is
checked against a strict pattern before anything is written.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.tags import InvalidTag, Tag, parse_tag
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from ..safezip import SafeZip, UnsafeArchiveError
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
MAX_METADATA_BYTES = 1 << 20


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


ParsedName = tuple[str, Version, tuple[()] | tuple[int, str], frozenset[Tag]]


@cache
def check_wheel_name(name: str) -> ParsedName:
    """Refuse a file name that is not a safe, parsable wheel name; return its parts."""
    if not name.endswith(".whl"):
        raise IndexInputError(f"{name!r}: not a wheel (only *.whl files belong in the wheel directory)")
    if len(name) > MAX_NAME_LENGTH or not SAFE_WHEEL_NAME.fullmatch(name):
        raise IndexInputError(
            f"{name!r}: wheel name has characters that do not belong in a wheel name "
            "(allowed: letters, digits, '.', '_', '+', '-')"
        )
    try:
        stem = name[:-4]
        dashes = stem.count("-")
        if dashes not in (4, 5):
            return parse_wheel_filename(name)  # raises, with packaging's own message
        head, python, abi, platform = stem.rsplit("-", 3)
        # packaging's parser, memoized on the name-version-build part and on the tag part: the
        # wheels of a site share both, and an index re-reads 10,000 names on every merge.
        dist_name, version, build, _any = _parse_head(head)
        return dist_name, version, build, _parse_tags(f"{python}-{abi}-{platform}")
    except (InvalidWheelFilename, InvalidVersion, InvalidTag):
        pass
    try:
        parse_wheel_filename(name)  # for packaging's message about the name itself
    except (InvalidWheelFilename, InvalidVersion, InvalidTag) as exc:
        raise IndexInputError(f"{name!r}: unparsable wheel name: {exc}") from None
    raise IndexInputError(f"{name!r}: unparsable wheel name")


@cache
def _parse_head(head: str) -> ParsedName:
    return parse_wheel_filename(f"{head}-py3-none-any.whl")


@cache
def _parse_tags(tags: str) -> frozenset[Tag]:
    return parse_tag(tags)


def file_sha256(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def inspect_wheel(name: str, parsed: ParsedName, source: bytes | Path, sha256: str, size: int) -> WheelInfo:
    """Check a wheel whose name passed :func:`check_wheel_name` and whose bytes hash to ``sha256``.

    ``source`` is the wheel's bytes, or a path to a private copy of them (large wheels).
    """
    dist_name, dist_version, _build, tags = parsed
    project = canonicalize_name(dist_name)
    try:
        with SafeZip(source) as archive:  # the audit policy's limits
            metadata_name = _find_metadata(name, set(archive.members))
            info_name = f"{project.replace('-', '_')}/_build_info.json"
            if info_name not in archive.members:
                raise IndexInputError(f"{name}: no {info_name} (not a wheel built by kiln)")
            for member in (metadata_name, info_name):
                if archive.members[member].file_size > MAX_METADATA_BYTES:
                    raise IndexInputError(f"{name}: {member} is {archive.members[member].file_size} bytes "
                                          f"(more than {MAX_METADATA_BYTES})")
            # Every member streams through its size and CRC checks, whatever it declares.
            contents = archive.verify(frozenset((metadata_name, info_name)))
    except UnsafeArchiveError as exc:
        raise IndexInputError(f"{name}: corrupt wheel (or unsafe): {exc}") from None
    except OSError as exc:
        raise IndexInputError(f"{name}: unreadable: {exc}") from None
    metadata = contents[metadata_name]
    build_info = _parse_build_info(name, contents[info_name])

    fields = _parse_metadata(name, metadata)
    if canonicalize_name(fields["name"]) != project:
        raise IndexInputError(f"{name}: METADATA names project {fields['name']!r}, the file name {dist_name!r}")
    if _version(fields["version"]) != dist_version:
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


def metadata_headers(raw: bytes) -> dict[str, list[str]]:
    """The header block of a core metadata file (RFC 822 style), keys lower-cased; continuation lines joined."""
    text = raw.decode("utf-8").replace("\r\n", "\n")
    head = text.split("\n\n", 1)[0] if not text.startswith("\n") else ""
    headers: dict[str, list[str]] = {}
    key: str | None = None
    for line in head.split("\n"):
        if line[:1] in (" ", "\t") and key is not None:
            headers[key][-1] += "\n" + line
            continue
        field, sep, value = line.partition(":")
        if not sep or not field or field != field.strip():
            raise ValueError(f"not a header line: {line[:60]!r}")
        key = field.lower()
        headers.setdefault(key, []).append(value.strip())
    return headers


@cache
def _version(text: str) -> Version:
    return Version(text)


@cache
def _requirement(line: str) -> Requirement:
    return Requirement(line)


@cache
def specifier(text: str) -> SpecifierSet:
    return SpecifierSet(text)


def _parse_metadata(name: str, raw: bytes) -> dict[str, Any]:
    try:
        headers = metadata_headers(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise IndexInputError(f"{name}: unreadable METADATA: {exc}") from None
    meta_name = (headers.get("name") or [""])[0]
    meta_version = (headers.get("version") or [""])[0]
    if not meta_name or not meta_version:
        raise IndexInputError(f"{name}: METADATA lacks Name or Version")
    try:
        _version(meta_version)
    except InvalidVersion:
        raise IndexInputError(f"{name}: METADATA has an invalid Version {meta_version!r}") from None
    requires_python: str | None = headers["requires-python"][0] if "requires-python" in headers else None
    if requires_python is not None:
        try:
            specifier(requires_python)
        except InvalidSpecifier:
            raise IndexInputError(f"{name}: METADATA has an invalid Requires-Python {requires_python!r}") from None
    torch_spec: str | None = None
    for line in headers.get("requires-dist", []):
        try:
            req = _requirement(line)
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
