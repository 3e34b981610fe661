"""Zip archives written byte by byte (struct, zlib), so a test can make each header say what it wants:
extra fields in the local header only, declared sizes that lie, bytes after the deflate stream, a local
header that disagrees with the central one."""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

STORED, DEFLATED = 0, 8
LOCAL = struct.Struct("<4sHHHHHIIIHH")
CENTRAL = struct.Struct("<4sHHHHHHIIIHHHHHII")
END = struct.Struct("<4sHHHHIIH")


def deflate(data: bytes, level: int = 6) -> bytes:
    packer = zlib.compressobj(level, zlib.DEFLATED, -15)
    return packer.compress(data) + packer.flush()


@dataclass
class Member:
    name: str
    data: bytes = b""
    method: int = DEFLATED
    raw: bytes | None = None  # the stored bytes (default: data, deflated when method is DEFLATED)
    declared_size: int | None = None  # the uncompressed size both headers state (default: len(data))
    crc: int | None = None  # default: CRC-32 of data
    local_extra: bytes = b""
    central_extra: bytes = b""
    mode: int = 0o100644

    def stored(self) -> bytes:
        if self.raw is not None:
            return self.raw
        return deflate(self.data) if self.method == DEFLATED else self.data


def extra_field(kind: int, body: bytes) -> bytes:
    return struct.pack("<HH", kind, len(body)) + body


def build(members: list[Member]) -> bytes:
    """Local entries back to back from byte 0, the central directory, the end record: a canonical archive."""
    out = bytearray()
    central = bytearray()
    for m in members:
        name = m.name.encode()
        raw = m.stored()
        crc = zlib.crc32(m.data) if m.crc is None else m.crc
        size = len(m.data) if m.declared_size is None else m.declared_size
        offset = len(out)
        out += LOCAL.pack(b"PK\x03\x04", 20, 0x800, m.method, 0, 0x5C21, crc, len(raw), size, len(name),
                          len(m.local_extra)) + name + m.local_extra + raw
        central += CENTRAL.pack(b"PK\x01\x02", 0x0314, 20, 0x800, m.method, 0, 0x5C21, crc, len(raw), size,
                                len(name), len(m.central_extra), 0, 0, 0, m.mode << 16, offset) + name + m.central_extra
    end = END.pack(b"PK\x05\x06", 0, 0, len(members), len(members), len(central), len(out), 0)
    return bytes(out + central + end)
