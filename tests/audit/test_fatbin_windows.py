"""The fatbin payload is read window by window (issue 44: the audit's memory is bounded whatever a library holds):
payload_windows gives back every byte once, each chunk at most window + overlap bytes, and a match shorter than
the overlap is seen whole in exactly one chunk, compressed (zstd, as nvcc 13 writes PTX) or not."""

from __future__ import annotations

import re

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln_tool.audit.archs import CudaArch
from kiln_tool.audit.fatbin import FatbinEntry, FatbinError, payload_windows

PATH = re.compile(rb"/home/ci/src/k[0-9]+\.cu")


def _windows(payload: bytes, compressed: bool, window: int, overlap: int) -> list[tuple[bytes, int | None]]:
    stored = zstandard.ZstdCompressor().compress(payload) if compressed else payload
    section = b"\0" * 16 + stored + b"\0" * 8
    entry = FatbinEntry(kind="ptx", arch=CudaArch.from_number(90, ""), compressed=compressed, offset=16,
                        size=len(stored))
    return list(payload_windows(memoryview(section), entry, window, overlap))


@settings(max_examples=60, deadline=None)
@given(filler=st.lists(st.binary(max_size=90), min_size=1, max_size=12), numbers=st.lists(
    st.integers(0, 10**6), min_size=1, max_size=12), compressed=st.booleans(), window=st.integers(1, 97))
def test_every_path_is_found_once_and_every_byte_comes_back(filler: list[bytes], numbers: list[int],
                                                            compressed: bool, window: int) -> None:
    overlap = 32  # longer than any path written here (at most 25 bytes)
    payload = b"".join(f + b"/home/ci/src/k%d.cu" % n for f, n in zip(filler, numbers, strict=False))
    windows = _windows(payload, compressed, window, overlap)
    rebuilt, tail = b"", b""
    found: list[bytes] = []
    for i, (chunk, owned_until) in enumerate(windows):
        assert chunk.startswith(tail) and len(chunk) <= window + overlap
        assert (owned_until is None) == (i == len(windows) - 1)
        rebuilt += chunk[len(tail):]
        found += [m.group() for m in PATH.finditer(chunk) if owned_until is None or m.start() < owned_until]
        tail = chunk[-overlap:]
    assert rebuilt == payload
    assert sorted(found) == sorted(m.group() for m in PATH.finditer(payload))


def test_a_payload_that_does_not_decompress_is_a_fatbin_error() -> None:
    entry = FatbinEntry(kind="ptx", arch=CudaArch.from_number(90, ""), compressed=True, offset=0, size=64)
    with pytest.raises(FatbinError, match=r"^compute_90 payload at 0x0 does not decompress: "):
        list(payload_windows(memoryview(b"\x28\xb5\x2f\xfd" + b"\xff" * 60), entry, 16, 4))
