"""Read one wheel for the index: its name, bytes, METADATA and build info, all checked.

Everything here is about refusing bad input early and clearly. A wheel's name
ends up in URLs, file names and HTML, and its build info decides which
directory it is listed in, so every field that reaches a path or a page is
checked against a strict pattern before anything is written.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.tags import InvalidTag, Tag, parse_tag
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from .. import kiln_wheel
from ..kiln_wheel import metadata_headers
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

    ``source`` is the wheel's bytes, or a path to a private copy of them (large wheels). The wheel must
    be a kiln wheel (kiln_tool.kiln_wheel: the definition the audit and repair apply to kiln's own
    wheels); every refusal names the rule it breaks.
    """
    try:
        kiln_name = kiln_wheel.check_name(name)
        with SafeZip(source) as archive:  # the audit policy's limits; a canonical archive
            wheel = kiln_wheel.check_archive(kiln_name, archive)
    except kiln_wheel.NotAKilnWheel as exc:
        raise IndexInputError(f"{name}: not a kiln wheel: {exc}") from None
    except UnsafeArchiveError as exc:
        raise IndexInputError(f"{name}: corrupt wheel (or unsafe): {exc}") from None
    except OSError as exc:
        raise IndexInputError(f"{name}: unreadable: {exc}") from None
    return WheelInfo(
        filename=name,
        project=kiln_name.project,
        version=kiln_name.version,
        sha256=sha256,
        size=size,
        metadata=wheel.metadata,
        requires_python=wheel.requires_python,
        torch_requirement=wheel.torch_requirement,
        abi_mode=wheel.abi_mode,
        cuda_tag=wheel.cuda_tag,
        torch_major_minor=wheel.torch_major_minor,
        python_tag=kiln_name.python_tag,
        platforms=kiln_name.platforms,
    )


@cache
def specifier(text: str) -> SpecifierSet:
    return SpecifierSet(text)


__all__ = ["ParsedName", "WheelInfo", "check_wheel_name", "file_sha256", "inspect_wheel", "metadata_headers",
           "specifier"]
