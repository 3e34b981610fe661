"""A damaged ELF in a wheel is an elf-valid finding of that library, never an escaping exception (which the CLI's
last resort turns into "cannot use this input: OverflowError: ..."). Fuzzed: small real libraries built by the
corpus (gcc, g++), their bytes overwritten at random offsets, in headers, tables and anywhere."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from audit_corpus import Corpus, make_wheel
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiln_tool.audit import audit_paths

LIBS = ("libplain.so", "libunder.so", "libneedsdep.so", "libnewglibc.so", "libbuildpath.so")
# Where the damage goes: the ELF header (offsets, counts, sizes of the tables), anywhere in the file, or one
# 64-bit field set to a huge value (the OverflowError of round 3: a size past ssize_t).
_WIDE = st.sampled_from([0xFFFFFFFFFFFFFFFF, 0x8000000000000000, 0x7FFFFFFFFFFFFFFF, 0xFFFFFFFF, 0x100000000])


@st.composite
def damage(draw: st.DrawFn) -> tuple[str, list[tuple[str, int, int]]]:
    name = draw(st.sampled_from(LIBS))
    edits = draw(st.lists(st.tuples(st.sampled_from(["header", "anywhere", "wide"]), st.integers(0, 1 << 30),
                                    st.integers(0, 255)), min_size=1, max_size=4))
    return name, edits


def _damaged(data: bytes, edits: list[tuple[str, int, int]], wide: list[int]) -> bytes:
    out = bytearray(data)
    for (where, at, value), big in zip(edits, wide, strict=True):
        if where == "header":
            out[16 + at % 48] = value
        elif where == "anywhere":
            out[at % len(out)] = value
        else:
            offset = (at % (len(out) - 8)) & ~7
            out[offset:offset + 8] = struct.pack("<Q", big)
    return bytes(out)


@pytest.fixture(scope="module")
def originals(corpus: Corpus) -> dict[str, bytes]:
    return {name: corpus[name].read_bytes() for name in LIBS}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=damage(), wide=st.lists(_WIDE, min_size=4, max_size=4))
def test_a_damaged_library_is_judged_never_escapes(originals: dict[str, bytes], case: tuple[str, list[tuple[str, int,
                                                   int]]], wide: list[int], tmp_path_factory: pytest.TempPathFactory
                                                   ) -> None:
    name, edits = case
    data = _damaged(originals[name], edits, wide[:len(edits)])
    tmp = tmp_path_factory.mktemp("damaged")
    # Beside an intact library that needs it: resolving through the damaged one must not escape either.
    wheel = make_wheel(tmp, {f"kilntest/{name}": data, "kilntest/libneedsdep.so": originals["libneedsdep.so"],
                             "kilntest/libdep.so": data})
    report = audit_paths([wheel])  # raises nothing: every damage is a finding
    (artifact,) = report.artifacts
    assert {lib.path for lib in artifact.libraries} >= {f"kilntest/{name}"}
    for lib in artifact.libraries:
        assert lib.checks, lib.path


@pytest.mark.parametrize("value", [0xFFFFFFFFFFFFFFFF, 0x8000000000000000])
def test_an_offset_or_size_past_ssize_t_is_an_elf_valid_finding(originals: dict[str, bytes], tmp_path: Path,
                                                                 value: int) -> None:
    """Each section's sh_offset, then its sh_size, set past 2**63 (what made pyelftools raise OverflowError from a
    seek, and trip its own asserts): the library gets a failed elf-valid, the audit returns."""
    data = originals["libplain.so"]
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    judged = 0
    for index in range(1, shnum):
        for field in (0x18, 0x20):  # sh_offset, sh_size
            damaged = bytearray(data)
            struct.pack_into("<Q", damaged, shoff + index * shentsize + field, value)
            lib = tmp_path / f"libplain-{index}-{field}.so"
            lib.write_bytes(bytes(damaged))
            (artifact,) = audit_paths([lib]).artifacts
            (report,) = artifact.libraries
            valid = [c for c in report.checks if c.id == "elf-valid"]
            judged += bool(valid and not valid[0].ok)
            lib.unlink()
    assert judged >= shnum - 1  # most such damage is caught; none escapes
