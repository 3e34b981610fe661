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
    utf8: bool = True  # flag 0x800: the name is UTF-8 (else cp437)
    zip64: bool = False  # both headers say 0xFFFFFFFF for the sizes; a zip64 extra field holds them
    descriptor: str | None = None  # "signed" or "bare": CRC and sizes in a data descriptor after the data (flag 8)
    descriptor_values: tuple[int, int, int] | None = None  # what the descriptor says (default: the truth)
    local_flags: int | None = None  # the local header's flags (default: the central's)
    central_comment: bytes = b""
    local_values: tuple[int, int, int] | None = None  # CRC and sizes of the local header (default: the truth;
    # with a descriptor: zeros)

    def stored(self) -> bytes:
        if self.raw is not None:
            return self.raw
        return deflate(self.data) if self.method == DEFLATED else self.data


def extra_field(kind: int, body: bytes) -> bytes:
    return struct.pack("<HH", kind, len(body)) + body


def build(members: list[Member], comment: bytes = b"", zip64_end: bool = False,
          zip64_fields: dict[str, int] | None = None) -> bytes:
    """Local entries back to back from byte 0, the central directory, the end record: a canonical archive.

    ``zip64_end``: a zip64 end record and its locator before the end record (whose counts and offsets then
    say 0xFFFF/0xFFFFFFFF); ``zip64_fields`` overrides that record's fields (signature, record size, disk,
    cd_disk, disk_entries, entries) or the locator's (locator_disk, disks)."""
    out = bytearray()
    central = bytearray()
    for m in members:
        name = m.name.encode("utf-8" if m.utf8 else "cp437")
        flags = (0x800 if m.utf8 else 0) | (0x8 if m.descriptor else 0)
        raw = m.stored()
        crc = zlib.crc32(m.data) if m.crc is None else m.crc
        size = len(m.data) if m.declared_size is None else m.declared_size
        compressed = len(raw)
        local_extra, central_extra = m.local_extra, m.central_extra
        if m.zip64:
            wide = extra_field(0x0001, struct.pack("<QQ", size, compressed))
            local_extra, central_extra = wide + local_extra, wide + central_extra
            size = compressed = 0xFFFFFFFF
        offset = len(out)
        local = m.local_values or ((0, 0, 0) if m.descriptor else (crc, compressed, size))
        local_flags = flags if m.local_flags is None else m.local_flags
        out += LOCAL.pack(b"PK\x03\x04", 45 if m.zip64 else 20, local_flags, m.method, 0, 0x5C21, local[0], local[1],
                          local[2], len(name), len(local_extra)) + name + local_extra + raw
        if m.descriptor:
            values = m.descriptor_values or (crc, len(raw), len(m.data) if m.declared_size is None else m.declared_size)
            out += (b"PK\x07\x08" if m.descriptor == "signed" else b"") + struct.pack("<IQQ" if m.zip64 else "<III",
                                                                                       *values)
        central += CENTRAL.pack(b"PK\x01\x02", 0x0314, 45 if m.zip64 else 20, flags, m.method, 0, 0x5C21, crc,
                                compressed, size, len(name), len(central_extra), len(m.central_comment), 0, 0,
                                m.mode << 16, offset) + name + central_extra + m.central_comment
    count, cd_size, cd_offset = len(members), len(central), len(out)
    tail = b""
    if zip64_end:
        f = {"signature": 0x06064B50, "record_size": 44, "disk": 0, "cd_disk": 0, "disk_entries": count,
             "entries": count, "locator_disk": 0, "disks": 1, **(zip64_fields or {})}
        record_at = cd_offset + cd_size
        tail = struct.pack("<IQHHIIQQQQ", f["signature"], f["record_size"], 45, 45, f["disk"], f["cd_disk"],
                           f["disk_entries"], f["entries"], cd_size, cd_offset)
        tail += struct.pack("<IIQI", 0x07064B50, f["locator_disk"], record_at, f["disks"])
        count, cd_size, cd_offset = 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF
    end = END.pack(b"PK\x05\x06", 0, 0, count, count, cd_size, cd_offset, len(comment)) + comment
    return bytes(out + central + tail + end)
