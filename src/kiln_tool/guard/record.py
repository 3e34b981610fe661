"""Which installed distribution a file belongs to, proven by its RECORD and by file identity.

A fix that deletes files may name only files an installed distribution lists in its RECORD, and only that
distribution's: a path that merely contains a package's name (torch's own ``_C`` under a folder called
``opkiln``) proves nothing. A file belongs to a distribution when a RECORD row, resolved against the folder the
distribution was installed into, is the same file (``os.path.samefile``). Standard library only.
"""

from __future__ import annotations

import csv
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

MAX_RECORD_BYTES = 16 * 1024 * 1024
"""A RECORD larger than this is not read (a real one of a large wheel is well under 1 MB)."""


@dataclass(frozen=True)
class Installed:
    """One installed distribution: its name (from the dist-info folder), the dist-info folder, and the files its
    RECORD lists that lie inside the folder it was installed into (scripts outside it are not ours to name)."""

    name: str
    dist_info: Path
    files: tuple[Path, ...]

    @property
    def normalized(self) -> str:
        return normalize(self.name)


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _record_rows(dist_info: Path) -> list[str]:
    record = dist_info / "RECORD"
    try:
        if not record.is_file() or record.stat().st_size > MAX_RECORD_BYTES:
            return []
        text = record.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    try:
        return [row[0] for row in csv.reader(text.splitlines()) if row and row[0]]
    except csv.Error:
        return []


def installed(dist_info: Path) -> Installed | None:
    """The distribution of ``dist_info`` (a ``*.dist-info`` folder), or None when it has no readable RECORD."""
    rows = _record_rows(dist_info)
    if not rows:
        return None
    root = dist_info.parent.resolve()
    files: list[Path] = []
    for row in rows:
        candidate = Path(os.path.normpath(root / row))
        if candidate.is_relative_to(root) and candidate != root:
            files.append(candidate)
    return Installed(_name(dist_info), dist_info, tuple(files))


def _name(dist_info: Path) -> str:
    """The distribution's name: METADATA's ``Name:`` (its first 64 KiB), else the folder's ``<name>-<version>``."""
    try:
        with (dist_info / "METADATA").open("rb") as stream:
            head = stream.read(64 * 1024).decode("utf-8", "replace")
    except OSError:
        head = ""
    match = re.search(r"^Name:[ \t]*([A-Za-z0-9][A-Za-z0-9._-]*)[ \t]*$", head, flags=re.M)
    return match.group(1) if match else dist_info.name.removesuffix(".dist-info").rsplit("-", 1)[0]


def distributions(roots: Iterable[Path]) -> list[Installed]:
    """Every distribution installed in ``roots`` (site folders), each once."""
    found: list[Installed] = []
    seen: set[Path] = set()
    for root in roots:
        try:
            infos = sorted(Path(root).glob("*.dist-info"))
        except OSError:
            continue
        for info in infos:
            key = info.resolve()
            if key in seen or not info.is_dir():
                continue
            seen.add(key)
            dist = installed(info)
            if dist is not None:
                found.append(dist)
    return found


def same_file(a: Path, b: Path) -> bool:
    try:
        return Path(a).samefile(b)
    except OSError:
        return False


def owner(path: Path, roots: Iterable[Path]) -> Installed | None:
    """The distribution in ``roots`` whose RECORD lists ``path`` (the same file, not a look-alike), else None.

    Only the distributions installed in the folder above ``path`` and its ancestors are read: a file's RECORD
    lies in the site folder it was installed into."""
    path = Path(path)
    ancestors = list(path.absolute().parents)
    wanted = {Path(r).resolve() for r in roots}
    candidates = [a for a in ancestors if a.resolve() in wanted] or ancestors
    for dist in distributions(candidates):
        if any(f.name == path.name and same_file(f, path) for f in dist.files):
            return dist
    return None


def copy_owner(path: Path, roots: Iterable[Path], dist: str, package: str) -> Installed | None:
    """The owner of ``path`` (see ``owner``) when it is a copy of ``package``'s distribution: named ``dist``, or
    installing the package's folder; None otherwise (torch's own ``_C`` is torch's, whatever its path holds)."""
    found = owner(path, roots)
    if found is None:
        return None
    root = found.dist_info.parent.resolve()
    folder = package.replace(".", "/") + "/"
    if found.normalized == normalize(dist) or any(f.relative_to(root).as_posix().startswith(folder)
                                                  for f in found.files):
        return found
    return None


def owned_files(dist: Installed, inside: Path | None = None) -> list[Path]:
    """The files of ``dist`` that are on disk, those under ``inside`` only when it is given."""
    base = Path(inside).resolve() if inside is not None else None
    return [f for f in dist.files if f.is_file() and (base is None or f.is_relative_to(base) or f == base)]


__all__ = ["Installed", "copy_owner", "distributions", "installed", "normalize", "owned_files", "owner", "same_file"]
