"""The project's source distributions on the index: the source fallback (issue 42) for a torch the matrix lacks.

A release publishes at most one sdist per version, unlabelled (``<name>-<version>.tar.gz``, PEP 625: what
`kiln sdist` makes), beside the wheels: in the site folder's ``sdist/`` (or the storage that holds the wheels),
listed on ``source/index.html`` only, so ``pip install <pkg> --no-binary <pkg> --no-build-isolation -f
<site>/source/`` finds it and a wheel page never makes pip build from source behind a user's back. The sdist is
untrusted input like a wheel: its name, its PKG-INFO (name and version agreeing with the file name, torch not
pinned to one build's torch) and every member's path are checked before anything is written.
"""

from __future__ import annotations

import re
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidSdistFilename, canonicalize_name, parse_sdist_filename
from packaging.version import InvalidVersion, Version

from .errors import IndexInputError

SDIST_DIR = "sdist"
SOURCE_PAGE = "source/index.html"
SAFE_SDIST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*\.tar\.gz")
MAX_NAME_LENGTH = 200
MAX_MEMBERS = 200_000
MAX_PKG_INFO_BYTES = 1 << 20
MAX_UNPACKED_BYTES = 4 << 30  # what its members may add up to: a small .tar.gz never unpacks past it
_PINNING = ("==", "===", "~=", "<", "<=")


@dataclass(frozen=True)
class PublishedSdist:
    filename: str
    project: str
    version: str
    sha256: str
    size: int
    # None: in the site folder (sdist/NAME). Otherwise its absolute URL in the wheels' storage and the storage's
    # own name for where it is (as PublishedWheel's).
    url: str | None = None
    stored_at: str | None = None

    def to_json(self) -> dict[str, Any]:
        stored = {} if self.url is None else {"url": self.url, "stored_at": self.stored_at}
        return {**stored, "filename": self.filename, "project": self.project, "version": self.version,
                "sha256": self.sha256, "size": self.size}

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str, project: str) -> PublishedSdist:
        """An entry that passed the schema, held to the rules a new sdist is held to (IndexInputError)."""
        filename = data["filename"]
        try:
            name_project, version = check_sdist_name(filename, project)
        except IndexInputError as exc:
            raise IndexInputError(f"{where}: malformed sdist entry: {exc}") from None
        if data["project"] != name_project or data["version"] != version:
            raise IndexInputError(f"{where}: malformed sdist entry for {filename!r}: project and version are not "
                                  "the file name's")
        url, stored_at = data.get("url"), data.get("stored_at")
        if (url is None) != (stored_at is None):
            raise IndexInputError(f"{where}: malformed sdist entry for {filename!r}: url and stored_at come together "
                                  "(an sdist in storage) or not at all (in the site folder)")
        if url is not None:
            from .manifest import check_base_url

            try:
                check_base_url(url.rsplit("/", 1)[0] + "/")
            except IndexInputError as exc:
                raise IndexInputError(f"{where}: malformed sdist entry for {filename!r}: url: {exc}") from None
            if unquote(url.rsplit("/", 1)[1]) != filename:
                raise IndexInputError(f"{where}: malformed sdist entry for {filename!r}: its url does not end in "
                                      "its file name")
        return cls(filename=filename, project=name_project, version=version, sha256=data["sha256"],
                   size=data["size"], url=url, stored_at=stored_at)


def check_sdist_name(name: str, project: str) -> tuple[str, str]:
    """(project, version) of an sdist file name exactly as `kiln sdist` writes it for ``project``; else
    IndexInputError naming the rule."""
    if len(name) > MAX_NAME_LENGTH or not SAFE_SDIST_NAME.fullmatch(name):
        raise IndexInputError(f"{name[:100]!r}: not an sdist name (<name>-<version>.tar.gz of letters, digits, "
                              "'.', '_', '+', '-')")
    try:
        parsed_name, version = parse_sdist_filename(name)
    except (InvalidSdistFilename, InvalidVersion) as exc:
        raise IndexInputError(f"{name!r}: unparsable sdist name: {exc}") from None
    if version.local is not None:
        raise IndexInputError(f"{name}: version {version} carries a local label; the sdist is for every torch, "
                              "unlabelled (make it with kiln sdist)")
    if parsed_name != canonicalize_name(project):
        raise IndexInputError(f"{name}: an sdist of {parsed_name!r}, not of {project!r}, the project this index "
                              "serves")
    canonical = f"{canonicalize_name(project).replace('-', '_')}-{version}.tar.gz"
    if name != canonical:
        raise IndexInputError(f"{name}: not the name kiln sdist gives it ({canonical}, PEP 625)")
    return canonicalize_name(project), str(version)


def version_key(version: str) -> Version:
    return Version(version)


def _headers(text: str) -> dict[str, list[str]]:
    headers: dict[str, list[str]] = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        if line[:1] in (" ", "\t"):
            continue
        key, sep, value = line.partition(":")
        if sep:
            headers.setdefault(key.strip().lower(), []).append(value.strip())
    return headers


def inspect_sdist(name: str, path: Path, sha256: str, size: int, project: str) -> PublishedSdist:
    """Check the sdist at ``path`` (a private copy of the bytes that hash to ``sha256``): its name, every
    member inside ``<name>-<version>/``, its PKG-INFO agreeing with the name, and torch not pinned."""
    project, version = check_sdist_name(name, project)
    stem = name.removesuffix(".tar.gz")
    pkg_info: bytes | None = None
    unpacked = 0
    try:
        with tarfile.open(path, mode="r:gz") as tar:
            for count, member in enumerate(tar, start=1):
                if count > MAX_MEMBERS:
                    raise IndexInputError(f"{name}: more than {MAX_MEMBERS} members")
                unpacked += member.size  # judged from the header, before the member is read or skipped
                if unpacked > MAX_UNPACKED_BYTES:
                    raise IndexInputError(f"{name}: its members add up to more than {MAX_UNPACKED_BYTES} bytes")
                parts = member.name.split("/")
                if parts[0] != stem or ".." in parts or member.name.startswith("/"):
                    raise IndexInputError(f"{name}: member {member.name[:100]!r} lies outside {stem}/")
                if not (member.isfile() or member.isdir()):
                    raise IndexInputError(f"{name}: member {member.name[:100]!r} is not a file or a folder (a link "
                                          "or a device: sdists kiln publishes hold files and folders only)")
                if member.name == f"{stem}/PKG-INFO":
                    if member.size > MAX_PKG_INFO_BYTES:
                        raise IndexInputError(f"{name}: PKG-INFO larger than {MAX_PKG_INFO_BYTES} bytes")
                    handle = tar.extractfile(member)
                    pkg_info = handle.read() if handle is not None else None
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        raise IndexInputError(f"{name}: not a readable .tar.gz: {' '.join(str(exc).split())[:200]}") from None
    if pkg_info is None:
        raise IndexInputError(f"{name}: no {stem}/PKG-INFO (not an sdist)")
    headers = _headers(pkg_info.decode("utf-8", "replace"))
    meta_name = (headers.get("name") or [""])[0]
    meta_version = (headers.get("version") or [""])[0]
    if canonicalize_name(meta_name) != project:
        raise IndexInputError(f"{name}: PKG-INFO names {meta_name[:100]!r}, not {project!r}")
    try:
        same_version = Version(meta_version) == Version(version)
    except InvalidVersion:
        same_version = False
    if not same_version:
        raise IndexInputError(f"{name}: PKG-INFO's version {meta_version[:100]!r} is not the file name's {version} "
                              "(pip refuses such an sdist)")
    for text in headers.get("requires-dist", []):
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            raise IndexInputError(f"{name}: PKG-INFO: unparsable Requires-Dist {text[:100]!r}") from None
        if canonicalize_name(requirement.name) == "torch" and \
                any(spec.operator in _PINNING for spec in requirement.specifier):
            raise IndexInputError(f"{name}: requires torch{requirement.specifier}, pinned to one torch; the sdist "
                                  "is for a torch the matrix lacks (kiln sdist leaves torch unpinned and the wheel "
                                  "built from it is pinned to the torch it finds)")
    return PublishedSdist(filename=name, project=project, version=version, sha256=sha256, size=size)


__all__ = ["SDIST_DIR", "SOURCE_PAGE", "PublishedSdist", "check_sdist_name", "inspect_sdist", "version_key"]
