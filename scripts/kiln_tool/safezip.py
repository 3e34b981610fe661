"""Reading untrusted zip archives (wheels) in bounded memory: one implementation for index, audit and repair.

The central directory is checked before a single byte is inflated: member names
(no absolute or ``..`` paths, backslashes, NUL, duplicates), no symbolic links, no
encryption, only stored or deflated members, and the declared sizes against the
limits (per member, in total, and the compression ratio). Declared sizes can lie,
so every read streams: inflated output is counted chunk by chunk and a member that
inflates past its declared size is refused at that point, then its length and CRC-32
are checked. Memory stays at a few chunks whatever the archive holds.
"""

from __future__ import annotations

import functools
import io
import itertools
import json
import stat
import struct
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Protocol

_CHUNK = 1 << 16
_LOCAL_HEADER = struct.Struct("<4s2xHH16xHH")  # magic, flags, method, ..., name length, extra length


class UnsafeArchiveError(ValueError):
    """The archive is corrupt, unsafe or over a limit: unusable input (exit 2 in every kiln command)."""


class ZipLimits(Protocol):
    """What bounds an archive (the audit policy's ``limits``, data/audit_policy/common.json)."""

    @property
    def max_file_bytes(self) -> int: ...
    @property
    def max_wheel_members(self) -> int: ...
    @property
    def max_total_bytes(self) -> int: ...
    @property
    def max_compression_ratio(self) -> float: ...
    @property
    def ratio_applies_above_bytes(self) -> int: ...


LIMITS_FILE = Path(__file__).resolve().parents[2] / "data" / "audit_policy" / "common.json"


@dataclass(frozen=True)
class ArchiveLimits:
    max_file_bytes: int
    max_wheel_members: int
    max_total_bytes: int
    max_compression_ratio: float
    ratio_applies_above_bytes: int


@functools.cache
def policy_limits() -> ArchiveLimits:
    """The ``limits`` of data/audit_policy/common.json: the audit's own, read without importing the audit."""
    try:
        data = json.loads(LIMITS_FILE.read_text(encoding="utf-8"))["limits"]
        return ArchiveLimits(**{k: data[k] for k in ArchiveLimits.__dataclass_fields__})
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UnsafeArchiveError(f"{LIMITS_FILE}: no usable archive limits ({exc!r})") from None


def _size(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def member_problem(info: zipfile.ZipInfo) -> str | None:
    """Why a member may not be in a wheel (its name or its kind), or None."""
    member = info.filename
    pure = PurePosixPath(member)
    if not member or member.startswith("/") or ".." in pure.parts or "\\" in member or "\0" in member \
            or (len(member) > 1 and member[1] == ":"):
        return f"member {member!r} would be installed outside site-packages"
    if stat.S_ISLNK(info.external_attr >> 16):
        return (f"member {member!r} is a symbolic link; wheels cannot carry links "
                "(pip would install it as a file holding the link target)")
    if info.flag_bits & 0x1:
        return f"member {member!r} is encrypted"
    if not info.is_dir() and info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        return f"member {member!r} uses compression method {info.compress_type} (wheels use stored or deflate)"
    return None


def check_members(infos: list[zipfile.ZipInfo], limits: ZipLimits, archive_bytes: int | None = None
                  ) -> dict[str, zipfile.ZipInfo]:
    """The members by name, once the whole central directory passed every rule and limit (else raises).

    With ``archive_bytes`` (the archive's size) two more bounds apply: members may not overlap (a
    quoted-overlap bomb reuses one compressed block for many members), and the whole archive may not
    inflate beyond the ratio limit times its size.
    """
    if len(infos) > limits.max_wheel_members:
        raise UnsafeArchiveError(f"{len(infos)} members, more than the limit of {limits.max_wheel_members}")
    members: dict[str, zipfile.ZipInfo] = {}
    total = 0
    for info in infos:
        problem = member_problem(info)
        if problem:
            raise UnsafeArchiveError(problem)
        # "a/b" and "a/b/" (or "a//b") would install to one path: compared in normal form.
        key = PurePosixPath(info.filename).as_posix()
        if info.filename in members or key in members:
            raise UnsafeArchiveError(f"member {info.filename!r} appears twice")
        if info.file_size > limits.max_file_bytes:
            raise UnsafeArchiveError(f"member {info.filename!r} unpacks to {_size(info.file_size)}, more than the "
                                     f"limit of {_size(limits.max_file_bytes)}")
        if info.file_size > limits.ratio_applies_above_bytes and \
                info.file_size > limits.max_compression_ratio * max(info.compress_size, 1):
            ratio = info.file_size / max(info.compress_size, 1)
            raise UnsafeArchiveError(f"member {info.filename!r} unpacks {info.compress_size} bytes to "
                                     f"{info.file_size} (ratio {ratio:.0f}:1, limit "
                                     f"{limits.max_compression_ratio:.0f}:1): a zip bomb, not a wheel")
        total += info.file_size
        if total > limits.max_total_bytes:
            raise UnsafeArchiveError(f"unpacks to more than the limit of {_size(limits.max_total_bytes)}")
        members[info.filename] = info
        members.setdefault(key, info)
    if archive_bytes is not None:
        if total > limits.ratio_applies_above_bytes and total > limits.max_compression_ratio * max(archive_bytes, 1):
            raise UnsafeArchiveError(f"{archive_bytes} bytes unpack to {total} (limit "
                                     f"{limits.max_compression_ratio:.0f}:1 for the whole archive): a zip bomb")
        ordered = sorted(infos, key=lambda i: i.header_offset)
        for this, after in itertools.pairwise(ordered):
            encoding = "utf-8" if this.flag_bits & 0x800 else "cp437"
            name_bytes = len(this.orig_filename.encode(encoding, "replace"))
            end = this.header_offset + _LOCAL_HEADER.size + name_bytes + this.compress_size
            if end > after.header_offset:
                raise UnsafeArchiveError(f"members {this.filename!r} and {after.filename!r} overlap in the archive")
    return {info.filename: info for info in infos}


class SafeZip:
    """A zip archive whose central directory passed :func:`check_members`; members are read streamed."""

    def __init__(self, source: Path | bytes, limits: ZipLimits | None = None) -> None:
        self.limits = limits or policy_limits()
        self._fh: BinaryIO = io.BytesIO(source) if isinstance(source, bytes) else Path(source).open("rb")  # noqa: SIM115 (closed by close())
        try:
            try:
                with zipfile.ZipFile(self._fh) as zf:  # parses the central directory only
                    infos = zf.infolist()
            except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError, struct.error,
                    UnicodeDecodeError, NotImplementedError) as exc:
                raise UnsafeArchiveError(f"not a readable zip archive ({exc})") from None
            self.members = check_members(infos, self.limits, self._fh.seek(0, io.SEEK_END))
        except BaseException:
            self._fh.close()
            raise

    def __enter__(self) -> SafeZip:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._fh.close()

    def names(self) -> list[str]:
        return list(self.members)

    def stream(self, name: str) -> Iterator[bytes]:
        """The member's bytes in chunks; raises UnsafeArchiveError past its declared size, on a bad CRC."""
        info = self.members[name]
        if info.is_dir():
            return
        fh = self._fh
        try:
            fh.seek(info.header_offset)
            header = fh.read(_LOCAL_HEADER.size)
            if len(header) != _LOCAL_HEADER.size:
                raise UnsafeArchiveError(f"member {name!r}: truncated local header")
            magic, _flags, method, name_len, extra_len = _LOCAL_HEADER.unpack(header)
            if magic != b"PK\x03\x04":
                raise UnsafeArchiveError(f"member {name!r}: bad local header")
            if method != info.compress_type:
                raise UnsafeArchiveError(f"member {name!r}: local and central headers disagree on compression")
            fh.seek(name_len + extra_len, io.SEEK_CUR)
            inflate = zlib.decompressobj(-15) if method == zipfile.ZIP_DEFLATED else None
            left = info.compress_size
            produced = 0
            crc = 0
            while left > 0:
                raw = fh.read(min(_CHUNK, left))
                if not raw:
                    raise UnsafeArchiveError(f"member {name!r} is truncated")
                left -= len(raw)
                while raw:
                    if inflate is None:
                        out, raw = raw, b""
                    else:
                        out = inflate.decompress(raw, _CHUNK)
                        raw = inflate.unconsumed_tail
                    produced += len(out)
                    if produced > info.file_size:
                        raise UnsafeArchiveError(f"member {name!r} inflates past its declared "
                                                 f"{info.file_size} bytes (a lying size is a zip bomb)")
                    crc = zlib.crc32(out, crc)
                    if out:
                        yield out
                    if inflate is not None and inflate.eof:
                        break
            if inflate is not None and (not inflate.eof or inflate.unused_data or left):
                raise UnsafeArchiveError(f"member {name!r}: corrupt deflate data (stream does not end where the "
                                         "archive says)")
            if produced != info.file_size:
                raise UnsafeArchiveError(f"member {name!r} holds {produced} bytes, the archive says {info.file_size}")
            if crc != info.CRC:
                raise UnsafeArchiveError(f"member {name!r}: bad CRC-32 (corrupt data)")
        except zlib.error as exc:
            raise UnsafeArchiveError(f"member {name!r}: corrupt deflate data ({exc})") from None
        except (OSError, struct.error) as exc:
            raise UnsafeArchiveError(f"member {name!r}: unreadable ({exc})") from None

    def read(self, name: str, max_bytes: int | None = None) -> bytes:
        """A whole member (small ones: METADATA, build info); ``max_bytes`` bounds what is kept in memory."""
        info = self.members[name]
        if max_bytes is not None and info.file_size > max_bytes:
            raise UnsafeArchiveError(f"member {name!r} is {info.file_size} bytes, more than {max_bytes} expected")
        return b"".join(self.stream(name))

    def verify(self, keep: frozenset[str] = frozenset()) -> dict[str, bytes]:
        """Stream every member through its size and CRC checks; return the contents of those in ``keep``."""
        kept: dict[str, bytes] = {}
        for name in self.members:
            if name in keep:
                kept[name] = self.read(name)
            else:
                for _chunk in self.stream(name):
                    pass
        return kept


__all__ = ["ArchiveLimits", "SafeZip", "UnsafeArchiveError", "ZipLimits", "check_members", "member_problem",
           "policy_limits"]
