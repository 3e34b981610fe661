"""Open what the user asked to audit, refusing anything unsafe or unusable (AuditInputError, exit 2)."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.parser import HeaderParser
from pathlib import Path, PurePosixPath
from typing import IO, TYPE_CHECKING, Any, NamedTuple

from ..project import project_wheel
from ..safezip import SafeZip, UnsafeArchiveError
from .elf import ELF_MAGIC
from .errors import AuditInputError
from .policy import Limits

if TYPE_CHECKING:
    from .. import kiln_wheel

_WHEEL_NAME_RE = re.compile(
    r"^(?P<name>[^-]+)-(?P<version>[^-]+)(?:-(?P<build>\d[^-]*))?-(?P<py>[^-]+)-(?P<abi>[^-]+)-(?P<plat>[^-]+)\.whl$")
_SO_RE = re.compile(r"\.so(\.[0-9A-Za-z_]+)*$")


# Members never read to look for ELF programs (sources, text, data formats).
_NOT_ELF_SUFFIXES = frozenset({".py", ".pyi", ".pyc", ".txt", ".md", ".rst", ".json", ".toml", ".cfg", ".ini", ".h",
                               ".hpp", ".hh", ".cuh", ".c", ".cc", ".cpp", ".cu", ".typed", ".html", ".css", ".js",
                               ".yaml", ".yml", ".csv", ".png", ".jpg", ".svg", ".pem", ".cmake", ".pxd", ".pyx"})


def is_shared_library_name(name: str) -> bool:
    return bool(_SO_RE.search(PurePosixPath(name).name))


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def check_input_path(path: Path, limits: Limits) -> None:
    if path.is_symlink():
        raise AuditInputError(f"{path}: is a symbolic link (to {path.readlink()}); audit the file itself, "
                              "so the report names what is shipped")
    if not path.exists():
        raise AuditInputError(f"{path}: no such file")
    if path.is_dir():
        raise AuditInputError(f"{path}: is a directory; pass wheel (.whl) or shared library (.so) files")
    if not path.is_file():
        raise AuditInputError(f"{path}: not a regular file")
    size = path.stat().st_size
    if size > limits.max_file_bytes:
        raise AuditInputError(f"{path}: {_gib(size)} is larger than the audit's limit of "
                              f"{_gib(limits.max_file_bytes)}; no wheel or library of ours is that big")


def is_zip(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(4) == b"PK\x03\x04"


def is_elf(path: Path) -> bool:
    with path.open("rb") as f:
        head = f.read(4)
    return head == ELF_MAGIC


class WheelName(NamedTuple):
    name: str
    version: str
    build: str | None
    python_tags: tuple[str, ...]
    abi_tags: tuple[str, ...]
    platform_tags: tuple[str, ...]

    @classmethod
    def parse(cls, filename: str) -> WheelName:
        match = _WHEEL_NAME_RE.match(filename)
        if match is None:
            raise AuditInputError(f"{filename}: not a wheel file name (name-version-python-abi-platform.whl)")
        return cls(match["name"], match["version"], match["build"], tuple(match["py"].split(".")),
                   tuple(match["abi"].split(".")), tuple(match["plat"].split(".")))


_BATCH_BYTES = 1 << 20  # chunks handed to the writing thread at once
# Smaller members are written and hashed in line: a thread's start and join (~1 ms) outweigh what it saves, and a
# wheel may hold thousands of small libraries (torch_npu: 2559).
_THREADED_FROM_BYTES = 16 << 20
_BATCHES_WAITING = 8  # at most this many batches in memory between the threads


# A wheel whose members unpack to at most this many bytes has its libraries unpacked to a tmpfs (/dev/shm) when
# there is one with room: a wheel of thousands of small libraries (torch_npu: 2559) otherwise spends more time
# creating, writing and mapping files on a disk filesystem than checking them. Larger wheels, and every wheel where
# TMPDIR is set, use the usual temporary folder: the tmpfs holds its files in memory until the audit ends.
_TMPFS = Path("/dev/shm")  # noqa: S108 - a memory filesystem on purpose, with a private folder made by tempfile
_TMPFS_MAX_WHEEL_BYTES = 256 << 20


def _scratch(infos: dict[str, zipfile.ZipInfo]) -> tempfile.TemporaryDirectory[str]:
    """The private temporary folder a wheel's libraries are unpacked into (see _TMPFS_MAX_WHEEL_BYTES)."""
    unpacked = sum(info.file_size for info in infos.values())
    where: str | None = None
    if unpacked <= _TMPFS_MAX_WHEEL_BYTES and "TMPDIR" not in os.environ:
        try:
            stat = os.statvfs(_TMPFS)
            if os.access(_TMPFS, os.W_OK) and stat.f_bavail * stat.f_frsize >= 4 * unpacked:
                where = str(_TMPFS)
        except OSError:
            where = None
    return tempfile.TemporaryDirectory(prefix="kiln-audit-", dir=where)


def _write_and_hash(chunks: Iterator[bytes], out: IO[bytes], hasher: Any, *, threaded: bool = True) -> int:
    """Write every chunk to `out` and into `hasher`; threaded, in a second thread while this one makes the next
    chunks (inflating and the CRC in safezip.stream, writing and hashing here: all release the GIL, so a big member
    takes two cores, not one). Returns the bytes written; an error of either thread is raised here, after both
    stop."""
    if not threaded:
        size = 0
        for chunk in chunks:
            out.write(chunk)
            hasher.update(chunk)
            size += len(chunk)
        return size
    import queue  # only members of _THREADED_FROM_BYTES and more come here
    import threading

    batches: queue.Queue[list[bytes] | None] = queue.Queue(maxsize=_BATCHES_WAITING)
    failed: list[BaseException] = []

    def consume() -> None:
        while (batch := batches.get()) is not None:
            if failed:
                continue  # keep taking batches, so the producer never waits on a full queue
            try:
                for chunk in batch:
                    out.write(chunk)
                    hasher.update(chunk)
            except BaseException as exc:  # raised again by the producing thread
                failed.append(exc)

    worker = threading.Thread(target=consume, name="kiln-audit-unpack", daemon=True)
    worker.start()
    size = 0
    batch: list[bytes] = []
    batch_bytes = 0
    try:
        for chunk in chunks:
            size += len(chunk)
            batch.append(chunk)
            batch_bytes += len(chunk)
            if batch_bytes >= _BATCH_BYTES:
                batches.put(batch)
                batch, batch_bytes = [], 0
        if batch:
            batches.put(batch)
    finally:
        batches.put(None)
        worker.join()
    if failed:
        raise failed[0]
    return size


@dataclass
class Wheel:
    """A wheel opened for auditing; small members are read once and kept, libraries unpacked to files."""

    path: Path
    name: WheelName
    archive: SafeZip
    infos: dict[str, zipfile.ZipInfo]
    """The files of the wheel (directory entries left out)."""
    kiln: kiln_wheel.KilnWheel | None = None
    """Set for the configured project's wheels, which passed the kiln-wheel definition; None for a
    foreign wheel, judged by the archive rules and the audit's checks alone."""
    _data: dict[str, bytes] = field(default_factory=dict)
    _files: dict[str, Path] = field(default_factory=dict)
    _sha256: dict[str, tuple[bytes, int]] = field(default_factory=dict)
    _tmp: tempfile.TemporaryDirectory[str] | None = None

    def library_file(self, member: str) -> Path:
        """The member unpacked (streamed through its size and CRC checks) into a private temporary
        folder, once: libraries are memory-mapped from there, never held in memory whole."""
        if member not in self._files:
            if self._tmp is None:
                self._tmp = _scratch(self.infos)
            target = Path(self._tmp.name) / f"{len(self._files)}.so"
            hasher = hashlib.sha256()  # RECORD's usual hash, taken on the way (never a second read)
            try:
                with target.open("wb") as out:
                    info = self.infos.get(member)
                    size = _write_and_hash(self.archive.stream(member), out, hasher,
                                           threaded=info is not None and info.file_size >= _THREADED_FROM_BYTES)
            except UnsafeArchiveError as exc:
                target.unlink(missing_ok=True)
                raise AuditInputError(f"{self.path}: cannot read {member}: {exc}") from None
            self._files[member] = target
            self._sha256[member] = (hasher.digest(), size)
        return self._files[member]

    def digest(self, member: str, algorithm: str) -> tuple[bytes, int]:
        """(hash, size) of a member, streamed: nothing big is kept in memory."""
        if algorithm == "sha256" and member in self._sha256:
            return self._sha256[member]
        hasher = hashlib.new(algorithm)
        size = 0
        if member in self._data:
            hasher.update(self._data[member])
            return hasher.digest(), len(self._data[member])
        if member in self._files:
            with self._files[member].open("rb") as f:
                while chunk := f.read(1 << 20):
                    hasher.update(chunk)
                    size += len(chunk)
            return hasher.digest(), size
        try:
            for chunk in self.archive.stream(member):
                hasher.update(chunk)
                size += len(chunk)
        except UnsafeArchiveError as exc:
            raise AuditInputError(f"{self.path}: cannot read {member}: {exc}") from None
        return hasher.digest(), size

    def read(self, member: str) -> bytes:
        """A member's bytes, streamed through its declared size and CRC (kiln_tool.safezip)."""
        if member not in self._data:
            try:
                self._data[member] = self.archive.read(member)
            except UnsafeArchiveError as exc:
                raise AuditInputError(f"{self.path}: cannot read {member}: {exc}") from None
        return self._data[member]

    def close(self) -> None:
        self.archive.close()
        self._data.clear()
        self._files.clear()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    @property
    def dist_info(self) -> str | None:
        dirs = {m.split("/", 1)[0] for m in self.infos if m.split("/", 1)[0].endswith(".dist-info")}
        return sorted(dirs)[0] if len(dirs) == 1 else None

    def text(self, member: str) -> str | None:
        if member not in self.infos:
            return None
        return self.read(member).decode("utf-8", errors="replace")

    def wheel_file(self) -> dict[str, list[str]]:
        text = self.text(f"{self.dist_info}/WHEEL") if self.dist_info else None
        if text is None:
            return {}
        message = HeaderParser().parsestr(text)
        return {key: message.get_all(key) or [] for key in set(message.keys())}

    def metadata(self) -> dict[str, list[str]]:
        text = self.text(f"{self.dist_info}/METADATA") if self.dist_info else None
        if text is None:
            return {}
        message = HeaderParser().parsestr(text)
        return {key: message.get_all(key) or [] for key in set(message.keys())}

    def build_info(self) -> dict[str, Any] | None:
        candidates = sorted(m for m in self.infos if m.endswith("/_build_info.json") and m.count("/") == 1)
        if not candidates:
            return None
        try:
            data = json.loads(self.read(candidates[0]))
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None
        return data if isinstance(data, dict) else None

    def libraries(self) -> list[str]:
        return sorted(m for m in self.infos if is_shared_library_name(m) and not m.endswith("/"))

    def executables(self) -> list[str]:
        """ELF members not named like a shared library (programs: bin/tool, ...; any other ELF file), found by
        their first bytes; text and Python files are never read for it."""
        found = []
        for member in sorted(self.infos):
            if not _may_be_program(member, self.infos[member]):
                continue
            try:
                head = next(iter(self.archive.stream(member)), b"")[:4]
            except UnsafeArchiveError as exc:
                raise AuditInputError(f"{self.path}: cannot read {member}: {exc}") from None
            if head == b"\x7fELF":
                found.append(member)
        return found


def _may_be_program(member: str, info: zipfile.ZipInfo) -> bool:
    """Whether a member is looked at as a possible ELF program (Wheel.executables): not a shared library by name,
    not a text or Python file, at least an ELF header long."""
    return not (member.endswith("/") or is_shared_library_name(member)
                or PurePosixPath(PurePosixPath(member).name).suffix.lower() in _NOT_ELF_SUFFIXES
                or info.file_size < 64)


def open_wheel(path: Path, limits: Limits) -> Wheel:
    """Open a wheel: its central directory checked against the member rules and limits before any
    inflating, and every member but the shared libraries (read, and so checked, by the audit itself)
    streamed once through its size and CRC checks, so corrupt data is an input error, never a crash."""
    name = WheelName.parse(path.name)
    if not is_zip(path):
        raise AuditInputError(f"{path}: not a zip archive, so not a wheel")
    try:
        archive = SafeZip(path, limits)
    except UnsafeArchiveError as exc:
        raise AuditInputError(f"{path}: {exc}") from None
    own: kiln_wheel.KilnWheel | None = None
    sha256: dict[str, tuple[bytes, int]] = {}
    files: dict[str, Path] = {}
    tmp: tempfile.TemporaryDirectory[str] | None = None
    try:
        infos = {m: info for m, info in archive.members.items() if not info.is_dir()}
        if project_wheel(path.name):
            from .. import kiln_wheel  # its rules and parsers: for the served project's wheels alone

            # kiln's own wheel: held to the positive definition the index publishes by (every member
            # streamed and hashed against RECORD on the way).
            try:
                own = kiln_wheel.check_archive(kiln_wheel.check_name(path.name), archive)
            except kiln_wheel.NotAKilnWheel as exc:
                raise AuditInputError(f"{path}: not a kiln wheel: {exc}") from None
        else:
            for member, info in infos.items():
                if is_shared_library_name(member):
                    continue
                chunks = iter(archive.stream(member))
                first = next(chunks, b"")
                hasher = hashlib.sha256()
                if first[:4] == ELF_MAGIC and _may_be_program(member, info):
                    # An ELF program, which the audit reads as a file (Wheel.library_file): unpacked on this one
                    # pass through its checks, not inflated a second time.
                    if tmp is None:
                        tmp = _scratch(infos)
                    target = Path(tmp.name) / f"{len(files)}.so"
                    with target.open("wb") as out:
                        size = _write_and_hash(itertools.chain([first], chunks), out, hasher,
                                               threaded=info.file_size >= _THREADED_FROM_BYTES)
                    files[member] = target
                else:
                    # Hashed on the way: RECORD's check takes this digest instead of inflating the member again.
                    size = len(first)
                    hasher.update(first)
                    for chunk in chunks:
                        hasher.update(chunk)
                        size += len(chunk)
                sha256[member] = (hasher.digest(), size)
    except (AuditInputError, UnsafeArchiveError, OSError) as exc:
        archive.close()
        if tmp is not None:
            tmp.cleanup()
        if isinstance(exc, UnsafeArchiveError):
            raise AuditInputError(f"{path}: {exc}") from None
        raise
    return Wheel(path=path, name=name, archive=archive, infos=infos, kiln=own, _files=files, _sha256=sha256,
                 _tmp=tmp)
