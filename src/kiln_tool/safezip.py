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
import hashlib
import io
import itertools
import json
import stat
import struct
import unicodedata
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Protocol

from . import resources

_CHUNK = 1 << 16
_LOCAL_HEADER = struct.Struct("<4s2xHH16xHH")  # magic, flags, method, ..., name length, extra length
_LOCAL_FULL = struct.Struct("<4sHHHHHIIIHH")  # magic, version, flags, method, time, date, crc, sizes, lengths
_CENTRAL = struct.Struct("<4sHHHHHHIIIHHHHHII")
_END = struct.Struct("<4sHHHHIIH")
_END64_LOCATOR = struct.Struct("<4sIQI")
_END64 = struct.Struct("<4sQHHIIQQQQ")
_MAX_CENTRAL_BYTES = 64 << 20
NAME_MAX = 255  # bytes of one path component on every Linux file system (ext4, xfs, btrfs, tmpfs)
MAX_MEMBER_PATH = 3840  # PATH_MAX is 4096 with its NUL: room for the site-packages folder it lands in
_UNICODE_PATH_EXTRA = 0x7075  # Info-ZIP's second name for a member: some unzippers use it, zipfile does not
_ZIP64_EXTRA = 0x0001
# Characters no member name may hold: control and format characters, separators of lines and paragraphs,
# surrogates, private and unassigned code points (installers and file systems disagree on all of them).
_BAD_CATEGORIES = frozenset(("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"))


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


LIMITS_FILE = resources.data_path("audit_policy", "common.json")


@dataclass(frozen=True)
class ArchiveLimits:
    max_file_bytes: int
    max_wheel_members: int
    max_total_bytes: int
    max_compression_ratio: float
    ratio_applies_above_bytes: int


def _read_policy_limits() -> ArchiveLimits:
    """The ``limits`` of data/audit_policy/common.json: the audit's own, read without importing the audit."""
    try:
        data = json.loads(LIMITS_FILE.read_text(encoding="utf-8"))["limits"]
        return ArchiveLimits(**{k: data[k] for k in ArchiveLimits.__dataclass_fields__})
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UnsafeArchiveError(f"{LIMITS_FILE}: no usable archive limits ({exc!r})") from None


# Cached by wrapping, not decorating: the logic stays an ordinary function that mutation testing mutates.
policy_limits = functools.cache(_read_policy_limits)


def _size(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def member_problem(info: zipfile.ZipInfo) -> str | None:
    """Why a member may not be in a wheel (its name or its kind), or None."""
    member = info.filename
    pure = PurePosixPath(member)
    # zipfile cuts ``filename`` at a NUL ("a/\0x.so" reads as the folder "a/"): the name as stored is orig_filename.
    if not member or member.startswith("/") or ".." in pure.parts or "\\" in member or "\0" in info.orig_filename \
            or (len(member) > 1 and member[1] == ":"):
        return f"member {member!r} would be installed outside site-packages"
    if any(unicodedata.category(c) in _BAD_CATEGORIES for c in member):
        return f"member {member!r} has control or invisible characters in its name (installers disagree on it)"
    if any(part in ("", ".") for part in member.rstrip("/").split("/")):
        return f"member {member!r} is not in normal form (an empty or '.' path part)"
    encoded = member.encode("utf-8", "surrogatepass")
    if any(len(part) > NAME_MAX for part in encoded.rstrip(b"/").split(b"/")):
        return (f"member {member[:80]!r}... has a path component longer than {NAME_MAX} bytes: no Linux file "
                "system can install it (ENAMETOOLONG)")
    if len(encoded) > MAX_MEMBER_PATH:
        return (f"member {member[:80]!r}... is a path of {len(encoded)} bytes: installed under site-packages it "
                f"passes PATH_MAX ({MAX_MEMBER_PATH} bytes allowed)")
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
    spellings: dict[str, str] = {}
    total = 0
    for info in infos:
        problem = member_problem(info)
        if problem:
            raise UnsafeArchiveError(problem)
        # "a/b" and "a/b/" (or "a//b") would install to one path: compared in normal form.
        key = PurePosixPath(info.filename).as_posix()
        if info.filename in members or key in members:
            raise UnsafeArchiveError(f"member {info.filename!r} appears twice")
        # "A.py" and "a.py" are one file on case-insensitive file systems (and NFC/NFD spellings on macOS).
        folded = unicodedata.normalize("NFC", key).casefold()
        if folded in spellings:
            raise UnsafeArchiveError(f"members {spellings[folded]!r} and {info.filename!r} differ only by case "
                                     "or Unicode normalization (one file on many file systems)")
        spellings[folded] = info.filename
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


@dataclass(frozen=True)
class _Entry:
    """One central-directory entry as its bytes say (zip64 extras applied)."""

    name: bytes
    flags: int
    method: int
    crc: int
    compress_size: int
    file_size: int
    offset: int


def _extras(data: bytes) -> dict[int, bytes]:
    fields: dict[int, bytes] = {}
    at = 0
    while at < len(data):
        if at + 4 > len(data):
            raise UnsafeArchiveError("a malformed extra field")
        kind, length = struct.unpack_from("<HH", data, at)
        body = data[at + 4:at + 4 + length]
        if len(body) != length or kind in fields:
            raise UnsafeArchiveError("a malformed extra field")
        fields[kind] = body
        at += 4 + length
    return fields


def _zip64(fields: dict[int, bytes], values: list[int], widths: list[int]) -> list[int]:
    """Replace the values at their 32-bit (or 16-bit) maximum by the zip64 extra's, in the order the format sets."""
    body = fields.get(_ZIP64_EXTRA, b"")
    at = 0
    out = []
    for value, width in zip(values, widths, strict=True):
        if value == (1 << width) - 1:
            size = 8 if width == 32 else 4
            if at + size > len(body):
                raise UnsafeArchiveError("a zip64 size or offset is missing from its extra field")
            value = int.from_bytes(body[at:at + size], "little")
            at += size
        out.append(value)
    return out


def _read_exact(fh: BinaryIO, offset: int, length: int, what: str) -> bytes:
    fh.seek(offset)
    data = fh.read(length)
    if len(data) != length:
        raise UnsafeArchiveError(f"truncated archive ({what})")
    return data


def canonical_entries(fh: BinaryIO, size: int) -> list[_Entry]:
    """The central directory, once every byte of the archive is proven to belong to it.

    A canonical archive is: local entries back to back from byte 0, each local header agreeing
    with its central entry (name bytes, flags, method, CRC and sizes, or a data descriptor holding
    them), then the central directory, then the end record(s) ending exactly at the end of the
    file. Anything else - data before the first entry (a second archive prepended), gaps, a local
    entry the central directory does not list, a name the local header spells otherwise, an Info-ZIP
    Unicode path (a second name), data after the end record - is read differently by different
    installers, so it is refused.
    """
    tail_len = min(size, _END.size + 0xFFFF)
    tail = _read_exact(fh, size - tail_len, tail_len, "end record")
    pos = tail.rfind(b"PK\x05\x06")
    while pos >= 0 and not (pos + _END.size <= len(tail)
                            and pos + _END.size + struct.unpack_from("<H", tail, pos + 20)[0] == len(tail)):
        pos = tail.rfind(b"PK\x05\x06", 0, pos)
    if pos < 0:
        raise UnsafeArchiveError("no end-of-archive record ends the file (data after the archive, or not a zip)")
    end_at = size - tail_len + pos
    _sig, disk, cd_disk, disk_entries, entries, cd_size, cd_offset, _comment = _END.unpack_from(tail, pos)
    cd_end = end_at
    if end_at >= _END64_LOCATOR.size and \
            _read_exact(fh, end_at - _END64_LOCATOR.size, 4, "zip64 locator") == b"PK\x06\x07":
        _s, z_disk, z_offset, disks = _END64_LOCATOR.unpack(
            _read_exact(fh, end_at - _END64_LOCATOR.size, _END64_LOCATOR.size, "zip64 locator"))
        record = _read_exact(fh, z_offset, _END64.size, "zip64 end record")
        sig, rec_size, _v1, _v2, disk, cd_disk, disk_entries, entries, cd_size, cd_offset = _END64.unpack(record)
        if sig != b"PK\x06\x06" or z_disk != 0 or disks != 1 \
                or z_offset + 12 + rec_size != end_at - _END64_LOCATOR.size:
            raise UnsafeArchiveError("a malformed zip64 end record")
        cd_end = z_offset
    if disk or cd_disk or disk_entries != entries:
        raise UnsafeArchiveError("a multi-disk archive (not a wheel)")
    if cd_offset + cd_size != cd_end or cd_size > _MAX_CENTRAL_BYTES:
        raise UnsafeArchiveError(f"the central directory does not end where the end record begins "
                                 f"({cd_offset} + {cd_size} != {cd_end}): bytes before, inside or after the archive "
                                 "that no central entry accounts for")
    central = _read_exact(fh, cd_offset, cd_size, "central directory")
    found: list[_Entry] = []
    at = 0
    while at < len(central):
        if at + _CENTRAL.size > len(central):
            raise UnsafeArchiveError("a truncated central directory entry")
        (sig, _made, _need, flags, method, _time, _date, crc, csize, usize, name_len, extra_len, comment_len,
         disk_start, _internal, _external, offset) = _CENTRAL.unpack_from(central, at)
        if sig != b"PK\x01\x02":
            raise UnsafeArchiveError("bytes in the central directory that are no entry")
        name = central[at + 46:at + 46 + name_len]
        fields = _extras(central[at + 46 + name_len:at + 46 + name_len + extra_len])
        if _UNICODE_PATH_EXTRA in fields:
            raise UnsafeArchiveError(f"member {name!r} carries a second (Info-ZIP Unicode) name")
        usize, csize, offset, disk_start = _zip64(fields, [usize, csize, offset, disk_start], [32, 32, 32, 16])
        if disk_start:
            raise UnsafeArchiveError("a multi-disk archive (not a wheel)")
        found.append(_Entry(name, flags, method, crc, csize, usize, offset))
        at += 46 + name_len + extra_len + comment_len
    if at != len(central) or len(found) != entries:
        raise UnsafeArchiveError(f"the end record counts {entries} entries, the central directory holds {len(found)}")
    expected = 0
    for entry in sorted(found, key=lambda e: e.offset):
        shown = entry.name.decode("utf-8", "replace")
        if entry.offset != expected:
            where = "before the first member" if expected == 0 else "between members"
            raise UnsafeArchiveError(f"member {shown!r} starts at byte {entry.offset}, not {expected}: "
                                     f"bytes {where} that no central entry accounts for")
        header = _read_exact(fh, entry.offset, _LOCAL_FULL.size, f"local header of {shown!r}")
        (sig, _need, flags, method, _time, _date, crc, csize, usize, name_len, extra_len) = _LOCAL_FULL.unpack(header)
        if sig != b"PK\x03\x04":
            raise UnsafeArchiveError(f"member {shown!r}: no local header where the central directory says")
        rest = _read_exact(fh, entry.offset + _LOCAL_FULL.size, name_len + extra_len, f"local header of {shown!r}")
        if rest[:name_len] != entry.name:
            raise UnsafeArchiveError(f"member {shown!r}: its local header names it "
                                     f"{rest[:name_len].decode('utf-8', 'replace')!r}")
        fields = _extras(rest[name_len:])
        if _UNICODE_PATH_EXTRA in fields:
            raise UnsafeArchiveError(f"member {shown!r} carries a second (Info-ZIP Unicode) name")
        if flags != entry.flags or method != entry.method:
            raise UnsafeArchiveError(f"member {shown!r}: local and central headers disagree on flags or method")
        end = entry.offset + _LOCAL_FULL.size + name_len + extra_len + entry.compress_size
        if flags & 0x8:  # sizes and CRC follow the data, in a descriptor
            if (crc, csize, usize) != (0, 0, 0) and (crc, csize, usize) != (entry.crc, entry.compress_size,
                                                                            entry.file_size):
                raise UnsafeArchiveError(f"member {shown!r}: local and central headers disagree on CRC or sizes")
            wide = entry.compress_size >= 0xFFFFFFFF or entry.file_size >= 0xFFFFFFFF or _ZIP64_EXTRA in fields
            width = 8 if wide else 4
            descriptor = _read_exact(fh, end, 4 + 4 + 2 * width, f"data descriptor of {shown!r}")
            if descriptor[:4] == b"PK\x07\x08":
                descriptor = descriptor[4:]
                end += 4
            else:
                descriptor = descriptor[:4 + 2 * width]
            values = (int.from_bytes(descriptor[:4], "little"), int.from_bytes(descriptor[4:4 + width], "little"),
                      int.from_bytes(descriptor[4 + width:4 + 2 * width], "little"))
            if values != (entry.crc, entry.compress_size, entry.file_size):
                raise UnsafeArchiveError(f"member {shown!r}: its data descriptor and central entry disagree")
            end += 4 + 2 * width
        else:
            usize, csize = _zip64(fields, [usize, csize], [32, 32])
            if (crc, csize, usize) != (entry.crc, entry.compress_size, entry.file_size):
                raise UnsafeArchiveError(f"member {shown!r}: local and central headers disagree on CRC or sizes")
        expected = end
    if expected != cd_offset:
        raise UnsafeArchiveError(f"{cd_offset - expected} bytes between the last member and the central directory "
                                 "that no central entry accounts for")
    return found


def _agree(infos: list[zipfile.ZipInfo], entries: list[_Entry]) -> None:
    """zipfile's reading of the central directory must be ours, entry for entry (no parser differential)."""
    if len(infos) != len(entries):
        raise UnsafeArchiveError(f"zipfile sees {len(infos)} members, the central directory holds {len(entries)}")
    for info, entry in zip(infos, entries, strict=True):
        encoding = "utf-8" if info.flag_bits & 0x800 else "cp437"
        try:
            name = info.orig_filename.encode(encoding)
        except UnicodeEncodeError:
            name = b""
        if (name, info.header_offset, info.compress_size, info.file_size, info.CRC) != \
                (entry.name, entry.offset, entry.compress_size, entry.file_size, entry.crc):
            raise UnsafeArchiveError(f"member {info.filename!r}: readers disagree on where or what it is")


def max_archive_bytes(limits: ZipLimits) -> int:
    """No archive within the limits is larger: every member at most stored, plus its headers and the directory."""
    return limits.max_total_bytes + _MAX_CENTRAL_BYTES + limits.max_wheel_members * (_LOCAL_HEADER.size + 0xFFFF * 2)


def check_archive(fh: BinaryIO, limits: ZipLimits | None = None) -> dict[str, zipfile.ZipInfo]:
    """Every rule of :class:`SafeZip` on an open file, reading only its directory and headers (no member is
    inflated, nothing is copied): what a copy into staging is checked against first. ``fh`` stays open."""
    limits = limits or policy_limits()
    size = fh.seek(0, io.SEEK_END)
    if size > max_archive_bytes(limits):
        raise UnsafeArchiveError(f"{_size(size)}: larger than any wheel within the limits "
                                 f"({_size(limits.max_total_bytes)} unpacked)")
    try:
        fh.seek(0)
        with zipfile.ZipFile(fh) as zf:  # parses the central directory only
            infos = zf.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError, struct.error,
            UnicodeDecodeError, NotImplementedError) as exc:
        raise UnsafeArchiveError(f"not a readable zip archive ({exc})") from None
    members = check_members(infos, limits, size)
    _agree(infos, canonical_entries(fh, size))
    return members


class SafeZip:
    """A zip archive whose central directory passed :func:`check_members`; members are read streamed."""

    def __init__(self, source: Path | bytes, limits: ZipLimits | None = None) -> None:
        self.limits = limits or policy_limits()
        self._fh: BinaryIO = io.BytesIO(source) if isinstance(source, bytes) else Path(source).open("rb")  # noqa: SIM115 (closed by close())
        try:
            self.members = check_archive(self._fh, self.limits)
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

    def verify_hashed(self, keep: frozenset[str] = frozenset()
                      ) -> tuple[dict[str, bytes], dict[str, tuple[bytes, int]]]:
        """:meth:`verify`, and every file member's (sha256 digest, size) as its RECORD line states them."""
        kept: dict[str, bytes] = {}
        files: dict[str, tuple[bytes, int]] = {}
        for name, info in self.members.items():
            if info.is_dir():
                continue
            digest = hashlib.sha256()
            chunks: list[bytes] | None = [] if name in keep else None
            for chunk in self.stream(name):
                digest.update(chunk)
                if chunks is not None:
                    chunks.append(chunk)
            files[name] = (digest.digest(), info.file_size)
            if chunks is not None:
                kept[name] = b"".join(chunks)
        return kept, files


__all__ = ["ArchiveLimits", "SafeZip", "UnsafeArchiveError", "ZipLimits", "canonical_entries", "check_archive",
           "check_members", "max_archive_bytes", "member_problem", "policy_limits"]
