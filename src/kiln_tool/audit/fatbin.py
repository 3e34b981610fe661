"""Parser for the `.nv_fatbin` section that nvcc puts in every library with device code.

No library reads this format, so it is ours; the layout was measured with nvcc 13.0 and is
cross-checked against `cuobjdump --list-elf --list-ptx` in tests/audit/test_fatbin.py:

    container: u32 magic 0xBA55ED50, u16 version, u16 header size, u64 payload size; containers
               follow each other (possibly after zero padding)
    entry:     u16 kind (1 PTX, 2 cubin) at +0, u32 header size at +4, u64 payload size at +8,
               u32 sm number at +0x1C, u64 flags at +0x28; next entry = entry + header + payload
    flags:     0x8000 zstd-compressed payload, 0x100000 "a" variant (sm_90a), 0x200000 "f" variant
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from .archs import CudaArch

FATBIN_MAGIC = 0xBA55ED50
_CONTAINER = struct.Struct("<IHHQ")
_KIND_PTX = 1
_KIND_CUBIN = 2
_FLAG_COMPRESSED = 0x8000
_FLAG_ARCH_SPECIFIC = 0x100000
_FLAG_FAMILY_SPECIFIC = 0x200000
_MIN_ENTRY_HEADER = 0x30


class FatbinError(ValueError):
    """The section is not a well-formed fatbin."""


@dataclass(frozen=True)
class FatbinEntry:
    kind: str  # "sass" (a cubin) or "ptx"
    arch: CudaArch
    compressed: bool
    offset: int  # of the payload, inside the section
    size: int

    @property
    def name(self) -> str:
        return self.arch.sm if self.kind == "sass" else self.arch.compute


@dataclass(frozen=True)
class ArchManifest:
    """What device code a library carries."""

    sass: tuple[CudaArch, ...]
    ptx: tuple[CudaArch, ...]

    def to_json(self) -> dict[str, list[str]]:
        return {"sass": [a.sm for a in self.sass], "ptx": [a.compute for a in self.ptx]}

    def describe(self) -> str:
        sass = ", ".join(a.sm for a in self.sass) or "none"
        ptx = ", ".join(a.compute for a in self.ptx) or "none"
        return f"SASS {sass}; PTX {ptx}"


Data = bytes | memoryview


def _u16(data: Data, off: int) -> int:
    return int(struct.unpack_from("<H", data, off)[0])


def _u32(data: Data, off: int) -> int:
    return int(struct.unpack_from("<I", data, off)[0])


def _u64(data: Data, off: int) -> int:
    return int(struct.unpack_from("<Q", data, off)[0])


def iter_entries(data: Data) -> Iterator[FatbinEntry]:
    """Every cubin and PTX entry of every container in `data` (the section's bytes)."""
    off = 0
    size = len(data)
    while off < size:
        if size - off < _CONTAINER.size:
            if bytes(data[off:]).strip(b"\0"):
                raise FatbinError(f"{size - off} stray bytes at offset {off:#x}")
            return
        magic, _version, header_size, payload_size = _CONTAINER.unpack_from(data, off)
        if magic == 0:
            off += 8  # alignment padding between containers
            continue
        if magic != FATBIN_MAGIC:
            raise FatbinError(f"bad container magic {magic:#010x} at offset {off:#x}")
        start = off + header_size
        end = start + payload_size
        if header_size < _CONTAINER.size or end > size:
            raise FatbinError(f"container at {off:#x} claims {payload_size} bytes, only {size - start} left")
        entry = start
        while entry < end:
            if end - entry < _MIN_ENTRY_HEADER:
                raise FatbinError(f"truncated entry header at offset {entry:#x}")
            kind = _u16(data, entry)
            entry_header = _u32(data, entry + 4)
            entry_payload = _u64(data, entry + 8)
            sm = _u32(data, entry + 0x1C)
            flags = _u64(data, entry + 0x28)
            payload_end = entry + entry_header + entry_payload
            if entry_header < _MIN_ENTRY_HEADER or payload_end > end:
                raise FatbinError(f"entry at {entry:#x} overruns its container")
            if kind not in (_KIND_PTX, _KIND_CUBIN):
                raise FatbinError(f"unknown entry kind {kind} at offset {entry:#x}")
            variant = "a" if flags & _FLAG_ARCH_SPECIFIC else "f" if flags & _FLAG_FAMILY_SPECIFIC else ""
            yield FatbinEntry(kind="ptx" if kind == _KIND_PTX else "sass", arch=CudaArch.from_number(sm, variant),
                              compressed=bool(flags & _FLAG_COMPRESSED), offset=entry + entry_header,
                              size=entry_payload)
            entry = payload_end
        off = end


def manifest(entries: list[FatbinEntry]) -> ArchManifest:
    return ArchManifest(sass=tuple(sorted({e.arch for e in entries if e.kind == "sass"})),
                        ptx=tuple(sorted({e.arch for e in entries if e.kind == "ptx"})))


def payload_windows(data: Data, entry: FatbinEntry, window: int, overlap: int) -> Iterator[tuple[bytes, int | None]]:
    """The entry's payload, decompressed when compressed, as (chunk, owned_until) pieces of at most
    window + overlap bytes: each chunk starts with the last `overlap` bytes of the one before, so a match of
    fewer than `overlap` bytes is seen whole; it belongs to the chunk it starts in before owned_until (None:
    the last chunk). Memory stays bounded by the window whatever the payload's size (a compressed PTX
    entry can decompress to hundreds of MB)."""
    raw = data[entry.offset:entry.offset + entry.size]
    pieces: Iterator[bytes]
    if entry.compressed:
        import zstandard  # lazy: only libraries with compressed device code need it

        def decompressed() -> Iterator[bytes]:
            try:
                for piece in zstandard.ZstdDecompressor().read_to_iter(raw, read_size=1 << 20, write_size=window):
                    if piece:  # an empty piece is no end: the loop below stops at the first empty one
                        yield bytes(piece)
            except zstandard.ZstdError as exc:
                raise FatbinError(f"{entry.name} payload at {entry.offset:#x} does not decompress: {exc}") from exc

        pieces = decompressed()
    else:
        pieces = (bytes(raw[at:at + window]) for at in range(0, len(raw), window))
    tail = b""
    piece = next(pieces, b"")
    while piece:
        following = next(pieces, b"")
        chunk = tail + piece
        yield chunk, (len(chunk) - overlap if following else None)
        tail = chunk[-overlap:] if overlap else b""
        piece = following
