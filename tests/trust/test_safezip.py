"""kiln_tool.safezip, the one zip reader of index, audit and repair: limits on the central directory
before inflating, and a streamed read that enforces declared sizes and CRCs."""

from __future__ import annotations

import io
import struct
import zipfile
from pathlib import Path

import pytest

from kiln_tool.safezip import ArchiveLimits, SafeZip, UnsafeArchiveError, policy_limits

LIMITS = ArchiveLimits(max_file_bytes=1 << 30, max_wheel_members=50, max_total_bytes=1 << 30,
                       max_compression_ratio=200, ratio_applies_above_bytes=1 << 20)


def _zip(members: dict[str, bytes], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=method) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


def test_the_limits_are_the_audit_policys() -> None:
    import json

    policy = Path(__file__).resolve().parents[2] / "src" / "kiln_tool" / "data" / "audit_policy" / "common.json"
    data = json.loads(policy.read_text())
    assert policy_limits() == ArchiveLimits(**data["limits"])


def test_a_good_archive_reads_back() -> None:
    members = {"a/x.py": b"print(1)\n" * 100, "a/y.bin": bytes(range(256)) * 10}
    with SafeZip(_zip(members), LIMITS) as archive:
        assert archive.verify(frozenset(members)) == members


def test_many_small_members_that_inflate_too_much_together_are_a_bomb() -> None:
    """Each member stays under the per-member ratio threshold; the archive as a whole does not."""
    data = _zip({f"m{i}.bin": bytes(900_000) for i in range(40)})
    with pytest.raises(UnsafeArchiveError, match="whole archive"):
        SafeZip(data, LIMITS)


def test_members_sharing_one_compressed_block_are_refused() -> None:
    data = bytearray(_zip({"a.bin": bytes(1000), "b.bin": bytes(1000)}))
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as zf:
        first, second = zf.infolist()
        central = zf.start_dir
    # Point b.bin's central entry at a.bin's local header (an overlapping, "quoted" bomb).
    at = central
    while struct.unpack_from("<I", data, at)[0] == 0x02014B50:
        name_len, extra_len, comment_len = struct.unpack_from("<HHH", data, at + 28)
        if data[at + 46:at + 46 + name_len] == b"b.bin":
            struct.pack_into("<I", data, at + 42, first.header_offset)
        at += 46 + name_len + extra_len + comment_len
    with pytest.raises(UnsafeArchiveError, match="overlap"):
        SafeZip(bytes(data), LIMITS)
    assert second.header_offset != first.header_offset


def test_an_encrypted_member_is_refused() -> None:
    data = bytearray(_zip({"a.bin": b"x" * 10}))
    central = data.rindex(b"PK\x01\x02")
    data[central + 8] |= 0x01
    with pytest.raises(UnsafeArchiveError, match="encrypted"):
        SafeZip(bytes(data), LIMITS)


def test_too_many_members_are_refused() -> None:
    with pytest.raises(UnsafeArchiveError, match="members"):
        SafeZip(_zip({f"{i}.py": b"" for i in range(51)}), LIMITS)


def test_a_member_shorter_than_declared_is_refused() -> None:
    data = bytearray(_zip({"a.bin": b"abc" * 100}, method=zipfile.ZIP_STORED))
    for magic, offset in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        at = data.index(magic)
        struct.pack_into("<I", data, at + offset, 400)
    with SafeZip(bytes(data), LIMITS) as archive, pytest.raises(UnsafeArchiveError, match="holds 300 bytes"):
        archive.read("a.bin")


@pytest.mark.parametrize("source", ["bytes", "path"])
def test_not_a_zip_is_one_error(source: str, tmp_path: Path) -> None:
    junk = b"PK\x03\x04" + b"\xff" * 200
    arg: bytes | Path = junk
    if source == "path":
        arg = tmp_path / "junk.whl"
        arg.write_bytes(junk)
    with pytest.raises(UnsafeArchiveError, match="not a readable zip"):
        SafeZip(arg, LIMITS)
