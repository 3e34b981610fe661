"""Hostile wheels made on the spot: zip bombs (honest and lying sizes), corrupt deflate data, members
that are links, absolute or `..` paths, duplicates."""

from __future__ import annotations

import stat
import struct
import warnings
import zipfile
from pathlib import Path

from index.synthetic_wheels import make_wheel

DATE = (2026, 1, 1, 0, 0, 0)


def add_members(wheel: Path, members: list[tuple[zipfile.ZipInfo, bytes]]) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about duplicate names: that is the point
        with zipfile.ZipFile(wheel, "a", compression=zipfile.ZIP_DEFLATED) as zf:
            for info, data in members:
                zf.writestr(info, data)
    return wheel


def member(name: str, mode: int = 0o100644, method: int = zipfile.ZIP_DEFLATED) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=DATE)
    info.external_attr = mode << 16
    info.compress_type = method
    return info


def bomb(directory: Path, zeros: int = 16 << 20, lie: int | None = None, **knobs: object) -> Path:
    """A kiln-shaped wheel with ``zeros`` bytes of zeros in one member; ``lie``: the size it declares."""
    wheel = add_members(make_wheel(directory, **knobs), [(member("opkiln/zeros.bin"), bytes(zeros))])  # type: ignore[arg-type]
    if lie is not None:
        set_declared_size(wheel, "opkiln/zeros.bin", lie)
    return wheel


def set_declared_size(wheel: Path, name: str, size: int) -> None:
    with zipfile.ZipFile(wheel) as zf:
        info = zf.getinfo(name)
        central = zf.start_dir
    data = bytearray(wheel.read_bytes())
    struct.pack_into("<I", data, info.header_offset + 22, size)
    at = central
    while data[at:at + 4] == b"PK\x01\x02":
        name_len, extra_len, comment_len = struct.unpack_from("<HHH", data, at + 28)
        if data[at + 46:at + 46 + name_len] == name.encode():
            struct.pack_into("<I", data, at + 24, size)
        at += 46 + name_len + extra_len + comment_len
    wheel.write_bytes(bytes(data))


def corrupt_deflate(wheel: Path, name: str = "opkiln/__init__.py") -> Path:
    """Garble a member's compressed bytes (its headers left intact)."""
    with zipfile.ZipFile(wheel) as zf:
        info = zf.getinfo(name)
    data = bytearray(wheel.read_bytes())
    start = info.header_offset + 30 + len(info.filename.encode())
    for i in range(start, start + info.compress_size):
        data[i] = 0xFF
    wheel.write_bytes(bytes(data))
    return wheel


SYMLINK = stat.S_IFLNK | 0o777


# Ambiguous archives: bytes that the central directory does not account for, or two spellings of one member.

def _central(data: bytes) -> tuple[int, int, int]:
    """(offset of the end record, of the central directory, its size) of a zip without a comment."""
    end = data.rindex(b"PK\x05\x06")
    size, offset = struct.unpack_from("<II", data, end + 12)
    return end, offset, size


def prepend(wheel: Path, junk: bytes) -> Path:
    """Data before the first local header (zipfile and pip still read it: offsets are relative to the end)."""
    wheel.write_bytes(junk + wheel.read_bytes())
    return wheel


def append(wheel: Path, junk: bytes) -> Path:
    wheel.write_bytes(wheel.read_bytes() + junk)
    return wheel


def hide_from_central(wheel: Path, name: str) -> Path:
    """Drop ``name``'s central entry: its local entry stays, read by a streaming unzipper, not by zipfile."""
    data = bytearray(wheel.read_bytes())
    end, offset, size = _central(bytes(data))
    at, entries = offset, []
    while at < offset + size:
        name_len, extra_len, comment_len = struct.unpack_from("<HHH", data, at + 28)
        entries.append((at, 46 + name_len + extra_len + comment_len, bytes(data[at + 46:at + 46 + name_len])))
        at += 46 + name_len + extra_len + comment_len
    kept = b"".join(bytes(data[a:a + n]) for a, n, member in entries if member != name.encode())
    record = bytearray(data[end:end + 22])
    count = len(entries) - 1
    struct.pack_into("<HHII", record, 8, count, count, len(kept), offset)
    wheel.write_bytes(bytes(data[:offset]) + kept + bytes(record))
    return wheel


def rename_local(wheel: Path, name: str, other: str) -> Path:
    """The local header of ``name`` spells it ``other`` (same length); the central directory keeps ``name``."""
    assert len(name.encode()) == len(other.encode())
    with zipfile.ZipFile(wheel) as zf:
        info = zf.getinfo(name)
    data = bytearray(wheel.read_bytes())
    start = info.header_offset + 30
    assert data[start:start + len(name.encode())] == name.encode()
    data[start:start + len(name.encode())] = other.encode()
    wheel.write_bytes(bytes(data))
    return wheel


def unicode_path_extra(name: str, shown: str) -> zipfile.ZipInfo:
    """A member whose Info-ZIP Unicode path extra field (0x7075) names it otherwise."""
    info = member(name)
    body = b"\x01" + struct.pack("<I", 0) + shown.encode()
    info.extra = struct.pack("<HH", 0x7075, len(body)) + body
    return info
