"""The DW_AT_name and DW_AT_comp_dir of every compile unit's top DIE, read straight from the mapped sections.

pyelftools answers the same question by parsing each unit's whole abbreviation table through its struct
library (a library with 24 units of 230 abbreviations took 1.7 s) after copying every debug section into
memory. Here only the top DIE is decoded, from the mapping, for the common shapes: DWARF 2-5, uncompressed
sections, strings inline (DW_FORM_string) or in .debug_str/.debug_line_str. Anything else, or anything
malformed, answers None and the caller asks pyelftools, whose answer (or error) stands: `top_names` never
decides a case pyelftools would decide differently (tests/audit/test_audit_fast_paths.py compares them).
"""

from __future__ import annotations

import struct
from typing import Any

_SHF_COMPRESSED = 0x800
_DW_AT_NAME = 0x03
_DW_AT_COMP_DIR = 0x1B
_FORM_STRING, _FORM_STRP, _FORM_LINE_STRP, _FORM_IMPLICIT_CONST = 0x08, 0x0E, 0x1F, 0x21
# form -> bytes it takes: an int, "address", "offset", "uleb", "sleb", or a (length size) for blocks.
_FIXED: dict[int, int | str] = {
    0x01: "address", 0x05: 2, 0x06: 4, 0x07: 8, 0x0B: 1, 0x0C: 1, 0x0D: "sleb", 0x0F: "uleb", 0x11: 1, 0x12: 2,
    0x13: 4, 0x14: 8, 0x15: "uleb", 0x17: "offset", 0x19: 0, 0x1B: "uleb", 0x1C: 4, 0x1E: 16, 0x20: 8,
    _FORM_IMPLICIT_CONST: 0, 0x22: "uleb", 0x23: "uleb", 0x24: 8, 0x29: 1, 0x2A: 2, 0x2B: 3, 0x2C: 4,
    _FORM_STRP: "offset", _FORM_LINE_STRP: "offset",
}
_BLOCKS: dict[int, int | str] = {0x03: 2, 0x04: 4, 0x09: "uleb", 0x0A: 1, 0x18: "uleb"}
# Sections pyelftools' get_dwarf_info treats specially: their presence sends the question to it.
_DEFER_IF_PRESENT = (".gnu_debugaltlink", ".debug_sup", ".zdebug_info", ".zdebug_abbrev", ".zdebug_str",
                     ".zdebug_line_str")


ABSENT = object()  # an attribute the top DIE does not have


class _Unreadable(Exception):
    """Not a shape this reader decodes: pyelftools is asked."""


def _uleb(data: Any, at: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= end:
            raise _Unreadable("LEB128 past its section")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def _sleb(data: Any, at: int, end: int) -> tuple[int, int]:
    value, after = _uleb(data, at, end)
    bits = 7 * (after - at)
    return (value - (1 << bits) if value & (1 << (bits - 1)) else value), after


def _section(lib: Any, name: str) -> tuple[int, int] | None:
    section = lib.section_by_name(name)
    if section is None:
        return None
    if section["sh_type"] == "SHT_NOBITS" or int(section["sh_flags"]) & _SHF_COMPRESSED:
        raise _Unreadable(f"{name} is compressed or has no bytes")
    return int(section["sh_offset"]), int(section["sh_size"])


def _abbreviations(data: Any, start: int, end: int) -> dict[int, list[tuple[int, int, int]]]:
    """code -> [(attribute, form, implicit value)] of one whole table (the last declaration of a code wins, as in
    pyelftools, which also reads the table to its end)."""
    table: dict[int, list[tuple[int, int, int]]] = {}
    at = start
    while True:
        code, at = _uleb(data, at, end)
        if code == 0:
            return table
        _tag, at = _uleb(data, at, end)
        if at >= end or data[at] not in (0, 1):  # DW_CHILDREN_no/yes, the only values pyelftools decodes
            raise _Unreadable("abbreviation's children flag")
        at += 1
        specs = []
        while True:
            attribute, at = _uleb(data, at, end)
            form, at = _uleb(data, at, end)
            implicit = 0
            if form == _FORM_IMPLICIT_CONST:
                implicit, at = _sleb(data, at, end)
            if attribute == 0 and form == 0:
                break
            specs.append((attribute, form, implicit))
        table[code] = specs


def _cstring(data: Any, section: tuple[int, int] | None, offset: int) -> bytes:
    if section is None or offset >= section[1]:
        raise _Unreadable("string offset outside its section")
    start = section[0] + offset
    stop = data.find(b"\0", start, section[0] + section[1])
    if stop < 0:
        raise _Unreadable("string without its terminator")
    return bytes(data[start:stop])


def top_names(lib: Any) -> list[tuple[object, object]] | None:
    """(DW_AT_name value, DW_AT_comp_dir value) of each compile unit in .debug_info order, ABSENT for an absent
    attribute; string forms give bytes. None overall when this reader does not decode the library's DWARF, or
    when a name or comp_dir has a form that is not a string (ask pyelftools: whether such a form decodes to a value
    or is malformed depends on the unit's version and on sections this reader does not read; a damaged
    .debug_abbrev giving DW_AT_name DW_FORM_addrx1 in a DWARF 4 unit is malformed to pyelftools)."""
    data = lib.buffer
    if not data or any(lib.section_by_name(name) is not None for name in _DEFER_IF_PRESENT):
        return None
    try:
        found = _top_names(lib, data)
    except (_Unreadable, struct.error, IndexError):
        return None
    if any(not isinstance(value, bytes) and value is not ABSENT for pair in found for value in pair):
        return None
    return found


def _top_names(lib: Any, data: Any) -> list[tuple[object, object]]:
    info = _section(lib, ".debug_info")
    abbrev = _section(lib, ".debug_abbrev")
    if info is None or abbrev is None:
        raise _Unreadable("no .debug_info or .debug_abbrev")
    strings, line_strings = _section(lib, ".debug_str"), _section(lib, ".debug_line_str")
    endian = "<" if lib.elf.little_endian else ">"
    tables: dict[int, dict[int, list[tuple[int, int, int]]]] = {}
    found: list[tuple[object, object]] = []
    base, size = info
    offset = 0
    while offset < size:
        at = base + offset
        if offset + 4 > size:
            raise _Unreadable("unit header past .debug_info")
        length = struct.unpack_from(endian + "I", data, at)[0]
        offset_size, fmt = 4, endian + "I"
        at += 4
        if length == 0xFFFFFFFF:
            length = struct.unpack_from(endian + "Q", data, at)[0]
            offset_size, fmt = 8, endian + "Q"
            at += 8
        unit_end = at + length
        if unit_end > base + size:
            raise _Unreadable("unit past .debug_info")
        version = struct.unpack_from(endian + "H", data, at)[0]
        at += 2
        if not 2 <= version <= 5:
            raise _Unreadable(f"DWARF version {version}")
        if version >= 5:
            unit_type, address_size = data[at], data[at + 1]
            abbrev_offset = struct.unpack_from(fmt, data, at + 2)[0]
            at += 2 + offset_size
            if unit_type in (4, 5):  # skeleton, split compile: dwo_id
                at += 8
            elif unit_type in (2, 6):  # type units: signature, type offset
                at += 8 + offset_size
            elif unit_type not in (1, 3):
                raise _Unreadable(f"unit type {unit_type}")
        else:
            abbrev_offset = struct.unpack_from(fmt, data, at)[0]
            address_size = data[at + offset_size]
            at += offset_size + 1
        if address_size not in (2, 4, 8) or abbrev_offset >= abbrev[1]:
            raise _Unreadable("address size or abbreviation offset")
        if abbrev_offset not in tables:
            tables[abbrev_offset] = _abbreviations(data, abbrev[0] + abbrev_offset, abbrev[0] + abbrev[1])
        code, at = _uleb(data, at, unit_end)
        values: dict[int, object] = {}
        if code:
            specs = tables[abbrev_offset].get(code)
            if specs is None:
                raise _Unreadable(f"abbreviation code {code} not in its table")
            for attribute, form, implicit in specs:
                value: object
                if form == _FORM_STRING:
                    stop = data.find(b"\0", at, unit_end)
                    if stop < 0:
                        raise _Unreadable("inline string without its terminator")
                    value, at = bytes(data[at:stop]), stop + 1
                elif form in _BLOCKS:
                    width = _BLOCKS[form]
                    if width == "uleb":
                        count, at = _uleb(data, at, unit_end)
                    else:
                        count = int.from_bytes(data[at:at + int(width)], "little" if endian == "<" else "big")
                        at += int(width)
                    value, at = 0, at + count
                elif form in _FIXED:
                    width = _FIXED[form]
                    if width == "uleb":
                        value, at = _uleb(data, at, unit_end)
                    elif width == "sleb":
                        value, at = _sleb(data, at, unit_end)
                    else:
                        count = address_size if width == "address" else offset_size if width == "offset" \
                            else int(width)
                        value = int.from_bytes(data[at:at + count], "little" if endian == "<" else "big")
                        at += count
                        if form == _FORM_STRP:
                            value = _cstring(data, strings, value)
                        elif form == _FORM_LINE_STRP:
                            value = _cstring(data, line_strings, value)
                        elif form == _FORM_IMPLICIT_CONST:
                            value = implicit
                else:
                    raise _Unreadable(f"form {form:#x}")
                if at > unit_end:
                    raise _Unreadable("attribute past its unit")
                values[attribute] = value
        found.append((values.get(_DW_AT_NAME, ABSENT), values.get(_DW_AT_COMP_DIR, ABSENT)))
        offset = unit_end - base
    return found
