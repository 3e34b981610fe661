"""kiln_tool.safezip at its edges: memory while inflating a bomb member, sizes that lie by more than one
chunk, members read back across chunks, local headers with extra fields or changed under the reader, bytes
hidden after a deflate stream, drive-letter names, and every limit at and just over its boundary.
(The mutation tests of issue 26 showed none of these pinned down.)"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import struct
import tracemalloc
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln_tool.safezip import ArchiveLimits, SafeZip, UnsafeArchiveError, check_members, member_problem
from trust.zip_bytes import DEFLATED, STORED, Member, build, deflate, extra_field

WIDE = ArchiveLimits(max_file_bytes=1 << 30, max_wheel_members=50, max_total_bytes=1 << 30,
                     max_compression_ratio=1e9, ratio_applies_above_bytes=1 << 20)
CHUNK = 1 << 16


def _random(n: int, seed: int = 1) -> bytes:
    """Incompressible bytes (deflate keeps them one-to-one): a member that spans many read chunks."""
    out = bytearray()
    counter = 0
    while len(out) < n:
        out += hashlib.sha256(f"{seed}:{counter}".encode()).digest()
        counter += 1
    return bytes(out[:n])


def _stream_all(archive: SafeZip, name: str) -> bytes:
    return b"".join(archive.stream(name))


# Memory

def test_inflating_a_bomb_member_keeps_memory_at_a_few_chunks() -> None:
    """32 MiB of zeros deflate to ~32 KiB: one read of the compressed bytes. Inflated whole, that read
    would hold 32 MiB at once; streamed, the output of each step is bounded by the chunk size."""
    size = 32 << 20
    data = build([Member("opkiln/zeros.bin", bytes(size))])
    assert len(data) < CHUNK  # the whole member is one read
    with SafeZip(data, WIDE) as archive:
        tracemalloc.start()
        try:
            biggest = 0
            total = 0
            for chunk in archive.stream("opkiln/zeros.bin"):
                biggest = max(biggest, len(chunk))
                total += len(chunk)
            _current, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert total == size
    assert biggest <= CHUNK
    assert peak < 8 * CHUNK, f"peak {peak} bytes while inflating"


# Sizes that lie, and members across chunks

@pytest.mark.parametrize("method", [STORED, DEFLATED])
def test_a_size_that_lies_by_more_than_a_chunk_is_caught_as_it_streams(method: int) -> None:
    """Declared 100 KiB, holds 1 MiB: no single chunk is over the declared size, their sum is."""
    declared = 100 << 10
    data = build([Member("opkiln/big.bin", _random(1 << 20), method=method, declared_size=declared)])
    seen = 0
    with SafeZip(data, WIDE) as archive, pytest.raises(UnsafeArchiveError, match="past its declared 102400 bytes"):
        for chunk in archive.stream("opkiln/big.bin"):
            seen += len(chunk)
    assert seen <= declared


@pytest.mark.parametrize("method", [STORED, DEFLATED])
def test_a_size_that_lies_short_is_refused_after_the_last_byte(method: int) -> None:
    content = _random(300_000)
    data = build([Member("opkiln/big.bin", content, method=method, declared_size=len(content) + 1)])
    with SafeZip(data, WIDE) as archive, pytest.raises(UnsafeArchiveError, match="holds 300000 bytes"):
        archive.read("opkiln/big.bin")


@pytest.mark.parametrize("method", [STORED, DEFLATED])
def test_members_of_many_chunks_read_back_exactly(method: int) -> None:
    members = {"opkiln/a.bin": _random(5 * CHUNK + 123, seed=2), "opkiln/b.txt": b"line\n" * 70_000,
               "opkiln/empty": b"", "opkiln/c.bin": _random(CHUNK, seed=3)}
    data = build([Member(name, content, method=method) for name, content in members.items()])
    with SafeZip(data, WIDE) as archive:
        assert archive.names() == list(members)
        for name, content in members.items():
            assert archive.read(name) == content
            assert _stream_all(archive, name) == content
        assert archive.verify(frozenset(members)) == members
        assert archive.verify(frozenset({"opkiln/a.bin"})) == {"opkiln/a.bin": members["opkiln/a.bin"]}
        assert archive.verify() == {}
        kept, files = archive.verify_hashed(frozenset({"opkiln/b.txt"}))
        assert kept == {"opkiln/b.txt": members["opkiln/b.txt"]}
        assert files == {name: (hashlib.sha256(c).digest(), len(c)) for name, c in members.items()}


def test_read_bounds_what_it_keeps() -> None:
    data = build([Member("opkiln/METADATA", b"x" * 1000)])
    with SafeZip(data, WIDE) as archive:
        assert archive.read("opkiln/METADATA", max_bytes=1000) == b"x" * 1000
        with pytest.raises(UnsafeArchiveError, match="1000 bytes, more than 999 expected"):
            archive.read("opkiln/METADATA", max_bytes=999)


def test_a_directory_member_streams_nothing() -> None:
    data = build([Member("opkiln/", b"", method=STORED, mode=0o40755), Member("opkiln/x.py", b"x = 1\n")])
    with SafeZip(data, WIDE) as archive:
        assert list(archive.stream("opkiln/")) == []
        assert archive.verify(frozenset({"opkiln/x.py"})) == {"opkiln/x.py": b"x = 1\n"}
        _kept, files = archive.verify_hashed()
        assert list(files) == ["opkiln/x.py"]


@pytest.mark.parametrize("method", [STORED, DEFLATED])
def test_a_bad_crc_is_refused(method: int) -> None:
    content = _random(3 * CHUNK)
    data = build([Member("opkiln/a.bin", content, method=method, crc=zlib.crc32(content) ^ 1)])
    with SafeZip(data, WIDE) as archive, pytest.raises(UnsafeArchiveError, match="bad CRC-32"):
        archive.read("opkiln/a.bin")


@settings(max_examples=25, deadline=None)
@given(content=st.binary(max_size=3 * CHUNK), method=st.sampled_from([STORED, DEFLATED]),
       local_extra=st.binary(max_size=40))
def test_any_member_reads_back_whatever_its_local_extra_field(content: bytes, method: int, local_extra: bytes) -> None:
    """The data begins after the local header's name and extra field (the extra is often longer locally)."""
    extra = extra_field(0xCAFE, local_extra)
    data = build([Member("opkiln/x.bin", content, method=method, local_extra=extra),
                  Member("opkiln/y.bin", content[::-1], method=method, local_extra=extra)])
    with SafeZip(data, WIDE) as archive:
        assert archive.read("opkiln/x.bin") == content
        assert archive.read("opkiln/y.bin") == content[::-1]


# Deflate streams that do not end where the archive says

def test_bytes_hidden_after_the_deflate_stream_are_refused() -> None:
    content = b"print('hello')\n" * 10
    raw = deflate(content) + b"hidden payload"
    data = build([Member("opkiln/x.py", content, raw=raw)])
    with SafeZip(data, WIDE) as archive, pytest.raises(UnsafeArchiveError, match="does not end where the archive"):
        archive.read("opkiln/x.py")


def test_bytes_after_the_deflate_stream_in_a_later_chunk_are_refused() -> None:
    content = _random(2 * CHUNK)
    raw = deflate(content) + b"\0" * (CHUNK + 10)
    data = build([Member("opkiln/x.bin", content, raw=raw)])
    with SafeZip(data, WIDE) as archive, pytest.raises(UnsafeArchiveError, match="does not end where the archive"):
        archive.read("opkiln/x.bin")


def test_a_deflate_stream_cut_short_is_refused() -> None:
    content = _random(2 * CHUNK)
    raw = deflate(content)[:-20]
    data = build([Member("opkiln/x.bin", content, raw=raw)])
    with SafeZip(data, WIDE) as archive, pytest.raises(UnsafeArchiveError, match="corrupt deflate"):
        archive.read("opkiln/x.bin")


def test_garbage_instead_of_deflate_data_is_refused() -> None:
    data = build([Member("opkiln/x.bin", b"abc", raw=b"\xff" * 50)])
    with SafeZip(data, WIDE) as archive, pytest.raises(UnsafeArchiveError, match="corrupt deflate data"):
        archive.read("opkiln/x.bin")


# The local header, read again when a member is streamed (the file may have changed since it was opened)

def _opened_then_changed(tmp_path: Path, change: str) -> tuple[SafeZip, str]:
    """The first member's local header changed on disk once the archive passed its checks. (The first: the
    reader's buffer then holds the last member, 64 KiB further on, and streaming reads the file again.)"""
    content = _random(CHUNK + 7)
    path = tmp_path / "a.whl"
    path.write_bytes(build([Member("opkiln/a.bin", content), Member("opkiln/b.bin", content)]))
    archive = SafeZip(path, WIDE)
    offset = archive.members["opkiln/a.bin"].header_offset
    assert offset == 0
    with path.open("r+b") as fh:
        if change == "magic":
            fh.seek(offset)
            fh.write(b"PK\x05\x05")
        elif change == "method":
            fh.seek(offset + 8)
            fh.write(struct.pack("<H", STORED))
        elif change == "truncated header":
            fh.truncate(offset + 20)
        elif change == "truncated data":
            fh.truncate(offset + 30 + len("opkiln/a.bin") + 100)
    return archive, "opkiln/a.bin"


@pytest.mark.parametrize(("change", "reason"), [
    ("magic", "bad local header"),
    ("method", "local and central headers disagree on compression"),
    ("truncated header", "truncated local header"),
    ("truncated data", "is truncated"),
])
def test_a_local_header_changed_after_opening_is_refused(change: str, reason: str, tmp_path: Path) -> None:
    archive, name = _opened_then_changed(tmp_path, change)
    with archive, pytest.raises(UnsafeArchiveError, match=reason):
        archive.read(name)


def test_an_unreadable_member_is_one_error(tmp_path: Path) -> None:
    path = tmp_path / "a.whl"
    content = _random(CHUNK + 7)
    path.write_bytes(build([Member("opkiln/a.bin", content), Member("opkiln/b.bin", content)]))
    archive = SafeZip(path, WIDE)
    os.close(archive._fh.fileno())  # the descriptor fails under the reader (EBADF; a.bin is not in its buffer)
    with pytest.raises(UnsafeArchiveError, match="unreadable"):
        archive.read("opkiln/a.bin")
    with contextlib.suppress(OSError):  # its descriptor is gone already
        archive.close()


# Names

@pytest.mark.parametrize("name", ["C:/x.py", "c:x.py", "Z:", "d:\\x.py", "C:/opkiln/__init__.py"])
def test_a_drive_letter_name_is_refused(name: str) -> None:
    data = build([Member(name, b"x")])
    with pytest.raises(UnsafeArchiveError, match="outside site-packages"):
        SafeZip(data, WIDE)


@pytest.mark.parametrize("name", ["ab:.py", "opkiln/C:x.py", "x"])
def test_a_colon_elsewhere_is_no_drive_letter(name: str) -> None:
    """Only a second character ':' names a drive; one-character names are fine."""
    data = build([Member(name, b"x")])
    with SafeZip(data, WIDE) as archive:
        assert archive.read(name) == b"x"


@pytest.mark.parametrize(("name", "reason"), [
    ("", "outside site-packages"),
    ("/x.py", "outside site-packages"),
    ("a/../../x.py", "outside site-packages"),
    ("a\\x.py", "outside site-packages"),
    ("a/\u200bx.py", "control or invisible"),
    ("a/\u2028x.py", "control or invisible"),
    ("a//x.py", "not in normal form"),
    ("a/./x.py", "not in normal form"),
    ("./x.py", "not in normal form"),
])
def test_every_bad_name_is_refused_with_its_reason(name: str, reason: str) -> None:
    data = build([Member(name, b"x")])
    with pytest.raises(UnsafeArchiveError, match=reason):
        SafeZip(data, WIDE)


def test_a_nul_in_a_name_is_refused() -> None:
    """zipfile cuts a name at NUL: "opkiln/\0evil.so" would read as the folder "opkiln/", its bytes never
    checked. The name as stored (orig_filename) is what is refused."""
    with pytest.raises(UnsafeArchiveError, match="outside site-packages"):
        SafeZip(build([Member("opkiln/\0evil.so", b"\x7fELF" * 100)]), WIDE)
    info = zipfile.ZipInfo("a/x.py")
    assert member_problem(info) is None
    info.orig_filename = "a/\0x.py"
    assert member_problem(info) == "member 'a/x.py' would be installed outside site-packages"


def test_a_link_is_refused_and_a_directory_is_not() -> None:
    with pytest.raises(UnsafeArchiveError, match="symbolic link"):
        SafeZip(build([Member("opkiln/l", b"/etc/passwd", mode=0o120777)]), WIDE)
    with SafeZip(build([Member("opkiln/", b"", method=STORED, mode=0o40755)]), WIDE) as archive:
        assert archive.names() == ["opkiln/"]


def test_a_directory_with_an_unknown_method_is_not_refused_for_it() -> None:
    """A directory holds no data, so its method is never used (zipfile writes some with odd methods)."""
    with SafeZip(build([Member("opkiln/", b"", method=12, raw=b"", mode=0o40755)]), WIDE) as archive:
        assert archive.names() == ["opkiln/"]
    with pytest.raises(UnsafeArchiveError, match="compression method 12"):
        SafeZip(build([Member("opkiln/x", b"", method=12, raw=b"")]), WIDE)


@pytest.mark.parametrize(("first", "second", "reason"), [
    ("opkiln/A.py", "opkiln/a.py", "differ only by case"),
    ("opkiln/\u00e9.py", "opkiln/e\u0301.py", "differ only by case or Unicode normalization"),
    ("opkiln/x", "opkiln/x/", "appears twice"),
])
def test_two_spellings_of_one_file_are_refused(first: str, second: str, reason: str) -> None:
    data = build([Member(first, b"1"), Member(second, b"2", method=STORED)])
    with pytest.raises(UnsafeArchiveError, match=reason):
        SafeZip(data, WIDE)


# Limits, at and just over each boundary

def _members(n: int, size: int = 10) -> list[Member]:
    return [Member(f"opkiln/m{i}.bin", _random(size, seed=i), method=STORED) for i in range(n)]


def test_the_member_count_limit_is_inclusive() -> None:
    limits = replace(WIDE, max_wheel_members=4)
    with SafeZip(build(_members(4)), limits) as archive:
        assert len(archive.names()) == 4
    with pytest.raises(UnsafeArchiveError, match="5 members, more than the limit of 4"):
        SafeZip(build(_members(5)), limits)


def test_the_member_size_limit_is_inclusive() -> None:
    limits = replace(WIDE, max_file_bytes=1000)
    with SafeZip(build([Member("opkiln/a.bin", _random(1000), method=STORED)]), limits) as archive:
        assert len(archive.read("opkiln/a.bin")) == 1000
    with pytest.raises(UnsafeArchiveError, match=r"'opkiln/a\.bin' unpacks to 0\.0 MiB, more than the limit"):
        SafeZip(build([Member("opkiln/a.bin", _random(1001), method=STORED)]), limits)


def test_the_total_size_limit_is_inclusive() -> None:
    limits = replace(WIDE, max_total_bytes=3000)
    with SafeZip(build(_members(3, size=1000)), limits) as archive:
        assert len(archive.names()) == 3
    members = _members(3, size=1000)
    members[2] = Member("opkiln/m2.bin", _random(1001), method=STORED)
    with pytest.raises(UnsafeArchiveError, match="unpacks to more than the limit"):
        SafeZip(build(members), limits)


def test_the_size_messages_use_the_unit_that_fits() -> None:
    limits = replace(WIDE, max_file_bytes=(1 << 30) - 1, max_total_bytes=1 << 40)
    big = Member("opkiln/a.bin", b"", raw=b"", method=STORED, declared_size=3 << 29)
    with pytest.raises(UnsafeArchiveError, match=r"unpacks to 1\.5 GiB, more than the limit of 1024\.0 MiB"):
        SafeZip(build([big]), limits)


def _zeros_member(size: int) -> tuple[Member, int]:
    member = Member("opkiln/zeros.bin", bytes(size))
    return member, len(member.stored())


def test_the_member_ratio_limit_is_inclusive() -> None:
    size = 4 << 20
    member, compressed = _zeros_member(size)
    exact = size / compressed
    limits = replace(WIDE, ratio_applies_above_bytes=1 << 20, max_compression_ratio=exact)
    with SafeZip(build([member]), limits) as archive:
        assert archive.names() == ["opkiln/zeros.bin"]
    with pytest.raises(UnsafeArchiveError, match=rf"unpacks {compressed} bytes to {size} \(ratio \d+:1.*zip bomb"):
        SafeZip(build([member]), replace(limits, max_compression_ratio=exact * 0.999))


def test_the_ratio_limit_applies_only_above_its_size() -> None:
    size = 4 << 20
    member, _compressed = _zeros_member(size)
    strict = replace(WIDE, max_compression_ratio=2.0, ratio_applies_above_bytes=size)
    # At the threshold: a member of exactly that size is not held to the ratio, nor is the archive.
    with SafeZip(build([member]), strict) as archive:
        assert archive.names() == ["opkiln/zeros.bin"]
    with pytest.raises(UnsafeArchiveError, match="zip bomb"):
        SafeZip(build([member]), replace(strict, ratio_applies_above_bytes=size - 1))


def test_the_whole_archive_ratio_limit_is_inclusive() -> None:
    """Many members, each under the per-member threshold, that inflate too much together."""
    members = [Member(f"opkiln/z{i}.bin", bytes(500_000)) for i in range(8)]
    data = build(members)
    total = 8 * 500_000
    exact = total / len(data)
    limits = replace(WIDE, ratio_applies_above_bytes=1 << 20, max_compression_ratio=exact)
    with SafeZip(data, limits) as archive:
        assert len(archive.names()) == 8
    with pytest.raises(UnsafeArchiveError, match=rf"{len(data)} bytes unpack to {total} .*whole archive"):
        SafeZip(data, replace(limits, max_compression_ratio=exact * 0.999))
    # At the size threshold the whole archive is not held to the ratio either.
    with SafeZip(data, replace(limits, max_compression_ratio=exact * 0.5, ratio_applies_above_bytes=total)):
        pass


def test_check_members_without_the_archive_size_skips_the_archive_bounds() -> None:
    members = [Member(f"opkiln/z{i}.bin", bytes(500_000)) for i in range(8)]
    data = build(members)
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        infos = zf.infolist()
    tight = replace(WIDE, ratio_applies_above_bytes=1 << 20, max_compression_ratio=2.0)
    assert list(check_members(infos, tight)) == [i.filename for i in infos]
    with pytest.raises(UnsafeArchiveError, match="whole archive"):
        check_members(infos, tight, len(data))


def test_adjacent_members_do_not_overlap_but_one_byte_of_overlap_does() -> None:
    """Members that end exactly where the next begins are fine; claiming one byte more is an overlap."""
    data = build([Member("opkiln/a.bin", _random(100), method=STORED),
                  Member("opkiln/b.bin", _random(100), method=STORED)])
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        infos = zf.infolist()
    assert list(check_members(infos, WIDE, len(data))) == ["opkiln/a.bin", "opkiln/b.bin"]
    infos[0].compress_size += 1
    with pytest.raises(UnsafeArchiveError, match=r"'opkiln/a\.bin' and 'opkiln/b\.bin' overlap"):
        check_members(infos, WIDE, len(data))
    infos[0].compress_size -= 1
    # The name's length counts in its encoding: "\u00e4" is two bytes in UTF-8 (flag 0x800), one in cp437.
    infos[0].orig_filename = "opkiln/\u00e4.bin"
    with pytest.raises(UnsafeArchiveError, match="overlap"):
        check_members(infos, WIDE, len(data))
    infos[0].flag_bits &= ~0x800
    assert list(check_members(infos, WIDE, len(data))) == ["opkiln/a.bin", "opkiln/b.bin"]


# Name encodings: zipfile's reading of each name must be the bytes the archive holds

@pytest.mark.parametrize(("name", "utf8"), [("opkiln/\u00e4\u00df.py", True), ("opkiln/\u00e4\u00df.py", False),
                                            ("opkiln/caf\u00e9/x.py", True), ("opkiln/plain.py", True)])
def test_a_name_reads_back_in_its_own_encoding(name: str, utf8: bool) -> None:
    """UTF-8 when flagged (0x800), cp437 otherwise: both spell these names with other bytes."""
    data = build([Member(name, b"x = 1\n", utf8=utf8)])
    with SafeZip(data, WIDE) as archive:
        assert archive.names() == [name]
        assert archive.read(name) == b"x = 1\n"


# Extra fields: parsed exactly, in the local and the central header

@pytest.mark.parametrize("where", ["local", "central"])
def test_several_extra_fields_and_an_empty_last_one_are_read(where: str) -> None:
    extra = extra_field(0x5455, b"\x01\x00\x00\x00\x00") + extra_field(0xCAFE, b"ab") + extra_field(0xBEEF, b"")
    member = Member("opkiln/x.py", b"x = 1\n", **{f"{where}_extra": extra})  # type: ignore[arg-type]
    with SafeZip(build([member]), WIDE) as archive:
        assert archive.read("opkiln/x.py") == b"x = 1\n"


def test_a_long_extra_field_is_read() -> None:
    """A body of 33,000 bytes: its length is an unsigned 16-bit number."""
    member = Member("opkiln/x.py", b"x = 1\n", local_extra=extra_field(0x8001, bytes(33_000)))
    with SafeZip(build([member]), WIDE) as archive:
        assert archive.read("opkiln/x.py") == b"x = 1\n"


@pytest.mark.parametrize("where", ["local", "central"])
@pytest.mark.parametrize("extra", [
    extra_field(0xCAFE, b"ab") + b"\x01\x02",  # two bytes after the last field
    extra_field(0xCAFE, b"ab") + b"\x01\x02\x03",
    extra_field(0xCAFE, b"ab")[:-1],  # a body shorter than its length
    extra_field(0xCAFE, b"ab") + extra_field(0xCAFE, b"cd"),  # one kind twice
], ids=["2 stray bytes", "3 stray bytes", "short body", "kind twice"])
def test_a_malformed_extra_field_is_refused(where: str, extra: bytes) -> None:
    member = Member("opkiln/x.py", b"x = 1\n", **{f"{where}_extra": extra})  # type: ignore[arg-type]
    with pytest.raises(UnsafeArchiveError, match=r"malformed extra field|not a readable zip"):
        SafeZip(build([member]), WIDE)


# zip64: sizes in the extra field

@pytest.mark.parametrize("method", [STORED, DEFLATED])
def test_zip64_sizes_are_read_from_the_extra_field(method: int) -> None:
    content = _random(CHUNK + 99)
    data = build([Member("opkiln/a.bin", content, method=method, zip64=True), Member("opkiln/b.py", b"b = 2\n")])
    with SafeZip(data, WIDE) as archive:
        assert archive.members["opkiln/a.bin"].file_size == len(content)
        assert archive.read("opkiln/a.bin") == content
        assert archive.read("opkiln/b.py") == b"b = 2\n"


def test_a_zip64_marker_without_its_extra_field_is_refused() -> None:
    data = bytearray(build([Member("opkiln/a.bin", b"abc", method=STORED)]))
    central = data.index(b"PK\x01\x02")
    struct.pack_into("<I", data, central + 24, 0xFFFFFFFF)  # the uncompressed size: "see the zip64 extra"
    # zipfile takes 0xFFFFFFFF at its word (4 GiB); limits wide enough that the central directory is read.
    limits = replace(WIDE, max_file_bytes=1 << 33, max_total_bytes=1 << 33, max_compression_ratio=1e12)
    with pytest.raises(UnsafeArchiveError, match="a zip64 size or offset is missing from its extra field"):
        SafeZip(bytes(data), limits)


def test_a_member_one_byte_over_a_whole_chunk_is_read_to_its_last_byte() -> None:
    content = _random(CHUNK + 1)
    with SafeZip(build([Member("opkiln/a.bin", content, method=STORED)]), WIDE) as archive:
        assert archive.read("opkiln/a.bin") == content


# Data descriptors: CRC and sizes after the data (flag 8), with or without their signature

@pytest.mark.parametrize("kind", ["signed", "bare"])
@pytest.mark.parametrize("method", [STORED, DEFLATED])
def test_members_with_data_descriptors_read_back(kind: str, method: int) -> None:
    first, second = _random(CHUNK + 5, seed=7), b"y = 2\n" * 100
    data = build([Member("opkiln/a.bin", first, method=method, descriptor=kind),
                  Member("opkiln/b.py", second, method=method, descriptor=kind)])
    with SafeZip(data, WIDE) as archive:
        assert archive.verify(frozenset({"opkiln/a.bin", "opkiln/b.py"})) == {"opkiln/a.bin": first,
                                                                             "opkiln/b.py": second}


def test_a_local_header_may_state_the_descriptors_values_too() -> None:
    content = b"x = 1\n"
    truth = (zlib.crc32(content), len(deflate(content)), len(content))
    with SafeZip(build([Member("opkiln/x.py", content, descriptor="signed", local_values=truth)]), WIDE) as archive:
        assert archive.read("opkiln/x.py") == content


@pytest.mark.parametrize(("member", "reason"), [
    (Member("opkiln/x.py", b"x = 1\n", descriptor="signed", descriptor_values=(0, 8, 6)),
     "its data descriptor and central entry disagree"),
    (Member("opkiln/x.py", b"x = 1\n", descriptor="bare", descriptor_values=(zlib.crc32(b"x = 1\n"), 8, 7)),
     "its data descriptor and central entry disagree"),
    (Member("opkiln/x.py", b"x = 1\n", descriptor="signed", local_values=(1, 0, 0)),
     "local and central headers disagree on CRC or sizes"),
    (Member("opkiln/x.py", b"x = 1\n", descriptor="signed", local_values=(0, 0, 6)),
     "local and central headers disagree on CRC or sizes"),
    (Member("opkiln/x.py", b"x = 1\n", local_values=(zlib.crc32(b"x = 1\n"), 8, 7)),
     "local and central headers disagree on CRC or sizes"),
])
def test_a_descriptor_or_local_header_that_disagrees_is_refused(member: Member, reason: str) -> None:
    with pytest.raises(UnsafeArchiveError, match=reason):
        SafeZip(build([member, Member("opkiln/y.py", b"y = 2\n")]), WIDE)


def test_a_descriptor_cut_off_by_the_end_of_the_file_is_refused() -> None:
    data = build([Member("opkiln/x.py", b"x = 1\n", descriptor="bare")])
    # Drop the central directory's claim: the descriptor's 12 bytes are all that separates data and directory.
    with SafeZip(data, WIDE) as archive:
        assert archive.read("opkiln/x.py") == b"x = 1\n"
    with pytest.raises(UnsafeArchiveError):
        SafeZip(data[:-40], WIDE)


# The end of the archive: comments, zip64 end records, data after the end

def test_an_archive_comment_holding_an_end_signature_is_refused() -> None:
    """zipfile takes the signature in the comment for the end record; ours is the one that ends the file:
    two readings of one archive, so it is refused."""
    comment = b"see PK\x05\x06 inside" + bytes(30)
    data = build([Member("opkiln/x.py", b"x = 1\n")], comment=comment)
    with pytest.raises(UnsafeArchiveError, match="zipfile sees 0 members, the central directory holds 1"):
        SafeZip(data, WIDE)


def test_an_archive_comment_is_read() -> None:
    data = build([Member("opkiln/x.py", b"x = 1\n")], comment=b"a comment\n")
    with SafeZip(data, WIDE) as archive:
        assert archive.read("opkiln/x.py") == b"x = 1\n"


def test_a_long_comment_is_read() -> None:
    data = build([Member("opkiln/x.py", b"x = 1\n")], comment=b"c" * 65_535)
    with SafeZip(data, WIDE) as archive:
        assert archive.names() == ["opkiln/x.py"]


@pytest.mark.parametrize("junk", [b"x", b"PK\x05\x06" + bytes(18), bytes(100)])
def test_data_after_the_end_record_is_refused(junk: bytes) -> None:
    data = build([Member("opkiln/x.py", b"x = 1\n")]) + junk
    with pytest.raises(UnsafeArchiveError, match=r"end-of-archive|not a readable zip|central directory does not"):
        SafeZip(data, WIDE)


def test_a_zip64_end_record_is_read() -> None:
    members = [Member("opkiln/x.py", b"x = 1\n"), Member("opkiln/y.bin", _random(CHUNK + 3), method=STORED)]
    with SafeZip(build(members, zip64_end=True), WIDE) as archive:
        assert archive.names() == ["opkiln/x.py", "opkiln/y.bin"]
        assert archive.read("opkiln/y.bin") == members[1].data


@pytest.mark.parametrize(("fields", "reason"), [
    ({"signature": 0x06064B51}, "malformed zip64 end record|not a readable zip"),
    ({"record_size": 45}, "malformed zip64 end record|not a readable zip"),
    ({"locator_disk": 1}, "malformed zip64 end record|not a readable zip|multi-disk"),
    ({"disks": 2}, "malformed zip64 end record|not a readable zip|multi-disk"),
    ({"disks": 0}, "malformed zip64 end record|not a readable zip|multi-disk"),
    ({"disk": 1}, "multi-disk|not a readable zip"),
    ({"cd_disk": 1}, "multi-disk|not a readable zip"),
    ({"disk_entries": 1}, "multi-disk|not a readable zip"),
    ({"entries": 3, "disk_entries": 3}, "end record counts 3 entries|not a readable zip"),
])
def test_a_bad_zip64_end_record_is_refused(fields: dict[str, int], reason: str) -> None:
    members = [Member("opkiln/x.py", b"x = 1\n"), Member("opkiln/y.py", b"y = 2\n")]
    with pytest.raises(UnsafeArchiveError, match=reason):
        SafeZip(build(members, zip64_end=True, zip64_fields=fields), WIDE)


@pytest.mark.parametrize("where", ["first", "between"])
def test_bytes_no_entry_accounts_for_are_refused_and_placed(where: str) -> None:
    """Junk before the first member or between two: the message says which."""
    a, b = Member("opkiln/a.py", b"a = 1\n"), Member("opkiln/b.py", b"b = 2\n")
    clean = build([a, b])
    with zipfile_infos(clean) as infos:
        cut = 0 if where == "first" else infos[1].header_offset
    junk = b"\0" * 16
    spliced = bytearray(clean[:cut] + junk + clean[cut:])
    # Move every offset at or after the cut (central entries and the end record's directory offset).
    end = spliced.rindex(b"PK\x05\x06")
    _cd_size, cd_offset = struct.unpack_from("<II", spliced, end + 12)
    struct.pack_into("<I", spliced, end + 16, cd_offset + len(junk))
    at = cd_offset + len(junk)
    while spliced[at:at + 4] == b"PK\x01\x02":
        name_len, extra_len, comment_len = struct.unpack_from("<HHH", spliced, at + 28)
        (offset,) = struct.unpack_from("<I", spliced, at + 42)
        if offset >= cut:
            struct.pack_into("<I", spliced, at + 42, offset + len(junk))
        at += 46 + name_len + extra_len + comment_len
    expected = "before the first member" if where == "first" else "between members"
    with pytest.raises(UnsafeArchiveError, match=expected):
        SafeZip(bytes(spliced), WIDE)


@contextlib.contextmanager
def zipfile_infos(data: bytes) -> Iterator[list[zipfile.ZipInfo]]:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        yield zf.infolist()


def test_bytes_between_the_last_member_and_the_directory_are_refused() -> None:
    clean = build([Member("opkiln/a.py", b"a = 1\n")])
    end = clean.rindex(b"PK\x05\x06")
    _cd_size, cd_offset = struct.unpack_from("<II", clean, end + 12)
    spliced = bytearray(clean[:cd_offset] + b"\0" * 9 + clean[cd_offset:])
    struct.pack_into("<I", spliced, end + 9 + 16, cd_offset + 9)
    with pytest.raises(UnsafeArchiveError, match="9 bytes between the last member and the central directory"):
        SafeZip(bytes(spliced), WIDE)


def test_a_size_of_exactly_one_gib_is_shown_in_gib() -> None:
    limits = replace(WIDE, max_file_bytes=1 << 30, max_total_bytes=1 << 40)
    big = Member("opkiln/a.bin", b"", raw=b"", method=STORED, declared_size=(1 << 30) + 1)
    with pytest.raises(UnsafeArchiveError, match=r"unpacks to 1\.0 GiB, more than the limit of 1\.0 GiB"):
        SafeZip(build([big]), limits)


def _with_disk_start_marker(central_extra: bytes) -> bytes:
    """One member whose central entry says disk 0xFFFF: "the disk number is in the zip64 extra field"."""
    data = bytearray(build([Member("opkiln/a.py", b"a = 1\n", central_extra=central_extra)]))
    struct.pack_into("<H", data, data.index(b"PK\x01\x02") + 34, 0xFFFF)
    return bytes(data)


def test_a_zip64_disk_number_is_four_bytes() -> None:
    """Only the disk number is at its maximum: the extra holds it alone, in 4 bytes (disk 0: readable)."""
    with SafeZip(_with_disk_start_marker(extra_field(0x0001, struct.pack("<I", 0))), WIDE) as archive:
        assert archive.read("opkiln/a.py") == b"a = 1\n"
    with pytest.raises(UnsafeArchiveError, match="multi-disk"):
        SafeZip(_with_disk_start_marker(extra_field(0x0001, struct.pack("<I", 3))), WIDE)


def test_a_zip64_disk_number_missing_from_the_extra_is_refused() -> None:
    with pytest.raises(UnsafeArchiveError, match="a zip64 size or offset is missing from its extra field"):
        SafeZip(_with_disk_start_marker(b""), WIDE)


@pytest.mark.parametrize("kind", ["signed", "bare"])
def test_a_zip64_member_with_a_data_descriptor_has_8_byte_sizes_there(kind: str) -> None:
    """With a zip64 extra in the local header, the descriptor's sizes are 8 bytes each."""
    first, second = _random(CHUNK + 11, seed=9), b"b = 2\n"
    data = build([Member("opkiln/a.bin", first, zip64=True, descriptor=kind), Member("opkiln/b.py", second)])
    with SafeZip(data, WIDE) as archive:
        assert archive.read("opkiln/a.bin") == first
        assert archive.read("opkiln/b.py") == second
    wrong = build([Member("opkiln/a.bin", first, zip64=True, descriptor=kind,
                          descriptor_values=(zlib.crc32(first), len(deflate(first)), len(first) + 1))])
    with pytest.raises(UnsafeArchiveError, match="its data descriptor and central entry disagree"):
        SafeZip(wrong, WIDE)


def test_local_flags_that_differ_are_refused_even_with_the_same_method() -> None:
    member = Member("opkiln/x.py", b"x = 1\n", local_flags=0)
    with pytest.raises(UnsafeArchiveError, match="local and central headers disagree on flags or method"):
        SafeZip(build([member, Member("opkiln/y.py", b"y = 2\n")]), WIDE)


def test_central_entry_comments_are_stepped_over() -> None:
    members = [Member("opkiln/x.py", b"x = 1\n", central_comment=b"first comment"),
               Member("opkiln/y.py", b"y = 2\n", central_comment=b"2nd")]
    with SafeZip(build(members), WIDE) as archive:
        assert archive.verify(frozenset({"opkiln/x.py", "opkiln/y.py"})) == {"opkiln/x.py": b"x = 1\n",
                                                                            "opkiln/y.py": b"y = 2\n"}


def test_a_folder_then_a_file_of_its_name_appear_twice() -> None:
    """"x/" then "x": one path; said as a duplicate whichever comes first."""
    data = build([Member("opkiln/x/", b"", method=STORED, mode=0o40755), Member("opkiln/x", b"1")])
    with pytest.raises(UnsafeArchiveError, match="'opkiln/x' appears twice"):
        SafeZip(data, WIDE)


def test_a_one_byte_member_declaring_megabytes_is_a_bomb() -> None:
    """The ratio divides by the compressed size, at least 1: one stored byte claiming 3 MiB at a limit of 2e6:1."""
    member = Member("opkiln/a.bin", b"", raw=b"\x00", method=STORED, declared_size=3 << 20)
    limits = replace(WIDE, max_compression_ratio=2e6, ratio_applies_above_bytes=1 << 20)
    with pytest.raises(UnsafeArchiveError, match=r"unpacks 1 bytes to 3145728 \(ratio 3145728:1, limit 2000000:1\)"):
        SafeZip(build([member]), limits)


def test_an_empty_part_before_a_last_part_of_x_is_refused() -> None:
    """Only trailing slashes are stripped before the parts are checked ("opkiln//X" has an empty part)."""
    with pytest.raises(UnsafeArchiveError, match="not in normal form"):
        SafeZip(build([Member("opkiln//X", b"x")]), WIDE)
