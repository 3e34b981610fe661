"""build-paths: no path of the build machine inside the binary (strings, DWARF, fatbin).

Strings are searched window by window outside machine code; DWARF adds what no string holds: each
compile unit's DW_AT_comp_dir joined with its relative DW_AT_name (pyelftools).

Every absolute path of two or more components is a candidate; the policy's rule
(BuildPathRule.classify, data in common.json "build_paths") says whether it names a source or
build tree (an error), a toolchain or dependency header (finding "toolchain"), or neither (a
run-time file such as /proc/self/maps). Machine code is not searched for strings.
"""

from __future__ import annotations

import bisect
import fnmatch
import posixpath
import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import PurePosixPath

from elftools.common.exceptions import DWARFError
from elftools.construct import ConstructError

from .. import dwarf_units
from ..context import LibraryContext
from ..elf import CORRUPT_ELF_ERRORS, SCAN_OVERLAP, SCAN_WINDOW, Buffer, ElfLibrary
from ..policy import BuildPathRule
from ..report import CheckResult, failed, passed

# Bytes that may be part of a path; a "/" preceded by one of them is inside a relative path.
_PATH_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-+~/@")
_ABSOLUTE_PATH = re.compile(rb"/[A-Za-z0-9._+~@-]+(?:/[A-Za-z0-9._+~@-]+)+")
_CODE_SECTIONS = frozenset({".text", ".plt", ".plt.got", ".plt.sec", ".init", ".fini"})
_MAX_SHOWN = 4
_HEADER_SUFFIXES = frozenset({".h", ".hh", ".hpp", ".hxx", ".h++", ".cuh", ".inl", ".inc", ".ipp", ".tcc",
                              ".tpp", ".def"})
# What pyelftools raises on DWARF it cannot parse: its own errors, its struct library's, a failed internal
# assert, and Python's own when a length or form points somewhere nonsensical.
_MALFORMED_DWARF = (*CORRUPT_ELF_ERRORS, DWARFError, ConstructError, AssertionError, ValueError, AttributeError,
                    TypeError)


def find_build_paths(data: Buffer, rule: BuildPathRule, pos: int = 0, endpos: int | None = None,
                     before: int | None = None) -> list[tuple[int, str, str]]:
    """(offset, path, 'source' or 'toolchain') of every build-machine path in data[pos:endpos] (offsets
    into `data`); with `before`, only paths that start before it (the rest belong to the next window)."""
    hits: list[tuple[int, str, str]] = []
    for match in _ABSOLUTE_PATH.finditer(data, pos, len(data) if endpos is None else endpos):
        start = match.start()
        if before is not None and start >= before:
            break
        if start and data[start - 1] in _PATH_BYTES:
            continue
        path = match.group().decode("ascii")
        kind = rule.classify(path)
        if kind is not None:
            hits.append((start, path, kind))
    return hits


def check_build_paths(ctx: LibraryContext) -> list[CheckResult]:
    rule = ctx.artifact.resolver.policy.build_paths
    sections = sorted(ctx.lib.allocated_sections(), key=lambda s: s[1])
    starts = [s[1] for s in sections]

    def section_at(offset: int) -> str:
        i = bisect.bisect_right(starts, offset) - 1
        if i >= 0 and offset < sections[i][1] + sections[i][2]:
            return sections[i][0] or "?"
        return "non-allocated data"

    found: dict[str, dict[str, set[str]]] = {"source": {}, "toolchain": {}, "prebuilt": {}}
    # Everything but machine code, window by window (the pages of each are dropped once searched).
    code = sorted((o, o + n) for name, o, n in sections if name in _CODE_SECTIONS)
    ranges, at = [], 0
    for begin, end in code:
        if begin > at:
            ranges.append((at, begin))
        at = max(at, end)
    if at < ctx.lib.size:
        ranges.append((at, ctx.lib.size))
    for begin, end in ranges:
        for window_start, window_end in ctx.lib.scan(begin, end):
            owned_until = window_end - SCAN_OVERLAP if window_end < end else None
            for offset, path, kind in find_build_paths(ctx.data, rule, window_start, window_end, owned_until):
                found[kind].setdefault(path, set()).add(section_at(offset))
    dwarf_note = _dwarf_paths(ctx, rule, found)
    _own_headers(rule, found)
    fatbin_data = ctx.lib.section_view(".nv_fatbin")
    if fatbin_data:
        from .. import fatbin  # device code: only a CUDA library has it

        try:
            base = ctx.lib.section_offset(".nv_fatbin")
            released = 0
            for entry in fatbin.iter_entries(fatbin_data):
                if entry.compressed:  # read decompressed, window by window: never the whole payload at once
                    for chunk, owned_until in fatbin.payload_windows(fatbin_data, entry, SCAN_WINDOW, SCAN_OVERLAP):
                        for _, path, kind in find_build_paths(chunk, rule, before=owned_until):
                            found[kind].setdefault(path, set()).add(f".nv_fatbin {entry.name}")
                if base is not None:  # the pages of what was read go (a big library's device code is GBs)
                    ctx.lib.release(base + released, entry.offset + entry.size - released)
                    released = entry.offset + entry.size
        except fatbin.FatbinError:
            pass  # cuda-sass reports a malformed fatbin
    results = []
    fix = ("map paths out at compile time (-ffile-prefix-map=<src>=<name>, for nvcc via -Xcompiler), build "
           "without -g/-lineinfo for release or strip debug info, and avoid __FILE__ in messages.")
    vendored = fnmatch.fnmatchcase(ctx.member, "*.libs/*")
    if found["source"] and vendored:
        results.append(failed("build-paths", f"{ctx.member}, a third-party library auditwheel grafted into the "
                              f"wheel, embeds {_describe(found['source'])} of its builder's machine.",
                              "nothing in this project's build: it comes with the vendored library (rebuild it "
                              "with -ffile-prefix-map, or take a stripped build).", "vendored"))
    elif found["source"]:
        results.append(failed("build-paths", f"{ctx.member} embeds {_describe(found['source'])} of the build "
                              "machine's source or build tree.", fix))
    if found["toolchain"]:
        results.append(failed("build-paths", f"{ctx.member} embeds {_describe(found['toolchain'])} of the build "
                              "machine's toolchain or dependency headers (their macros' __FILE__).",
                              "-ffile-prefix-map for the toolchain and dependency include directories too "
                              "(e.g. -ffile-prefix-map=$(python -c 'import torch,os;print(os.path.dirname("
                              "torch.__file__))')=torch).", "toolchain"))
    notes = [n for n in (dwarf_note, _prebuilt_note(found["prebuilt"])) if n]
    if notes and results:
        results = [replace(r, detail=f"{r.detail} ({'; '.join(notes)})") for r in results]
    return results or [passed("build-paths", "no build-machine paths" + (f" ({'; '.join(notes)})" if notes else ""))]


def _own_headers(rule: BuildPathRule, found: dict[str, dict[str, set[str]]]) -> None:
    """Headers of an include tree are a dependency's (toolchain) unless the project's own sources lie beside that
    tree: a found source path under the include tree's root is the evidence that it is the project's."""
    sources = [p for p in found["source"] if PurePosixPath(p).suffix.lower() not in _HEADER_SUFFIXES]
    for path in list(found["toolchain"]):
        root = rule.include_root(path)
        if root is None or path.startswith(rule.toolchain_prefixes) or not rule.dependency_dirs.isdisjoint(
                path.split("/")[:-1]):
            continue
        if any(s.startswith(root + "/") for s in sources):
            found["source"].setdefault(path, set()).update(found["toolchain"].pop(path))


def _prebuilt_note(paths: dict[str, set[str]]) -> str:
    if not paths:
        return ""
    return (f"{len(paths)} path(s) of the toolchain's own prebuilt objects (e.g. '{next(iter(paths))}') are not the "
            "project's and were not counted")


# What pyelftools' get_dwarf_info reads into memory whole, each of them (elffile.py), also as .zdebug_*.
_DWARF_SECTIONS = (".debug_info", ".debug_aranges", ".debug_abbrev", ".debug_str", ".debug_line", ".debug_frame",
                   ".debug_loc", ".debug_ranges", ".debug_pubtypes", ".debug_pubnames", ".debug_addr",
                   ".debug_str_offsets", ".debug_line_str", ".debug_loclists", ".debug_rnglists", ".debug_sup",
                   ".gnu_debugaltlink", ".debug_types")


def dwarf_bytes(lib: ElfLibrary) -> int:
    """The bytes reading the DWARF puts in memory: every section pyelftools loads with .debug_info, decompressed
    (SHF_COMPRESSED and .zdebug_* at their uncompressed size), and .eh_frame."""
    total = 0
    for name in (*_DWARF_SECTIONS, *(f".z{n[1:]}" for n in _DWARF_SECTIONS), ".eh_frame"):
        section = lib.section_by_name(name)
        if section is not None and section["sh_type"] != "SHT_NOBITS":
            total += int(getattr(section, "data_size", section["sh_size"]))
    return total


def _dwarf_paths(ctx: LibraryContext, rule: BuildPathRule, found: dict[str, dict[str, set[str]]]) -> str:
    """Source paths named by debug info: DW_AT_comp_dir joined with a relative DW_AT_name, per compile
    unit (the joined path appears nowhere as a string). Returns a note when the DWARF was not read."""
    section = ctx.lib.section_by_name(".debug_info")
    if section is None or section["sh_type"] == "SHT_NOBITS":
        return ""
    total = dwarf_bytes(ctx.lib)
    if total > rule.max_dwarf_bytes:
        return (f"its {total >> 20} MiB of DWARF (.debug_info and the sections read with it) were not read (more "
                "than the policy's max_dwarf_bytes): only their strings were searched")
    try:
        for name, comp_dir in _unit_names(ctx.lib):
            if name is dwarf_units.ABSENT or comp_dir is dwarf_units.ABSENT:
                continue
            name_text = _text(name)
            directory = _text(comp_dir)
            if not name_text or name_text.startswith("/") or not directory.startswith("/"):
                continue
            path = posixpath.normpath(posixpath.join(directory, name_text))
            kind = rule.classify(path)
            if kind is not None:
                found[kind].setdefault(path, set()).add(".debug_info (DW_AT_comp_dir + DW_AT_name)")
    except _MALFORMED_DWARF:
        return "its debug info is malformed and was not read: only its strings were searched"
    return ""


def _unit_names(lib: ElfLibrary) -> Iterator[tuple[object, object]]:
    """(DW_AT_name, DW_AT_comp_dir) values of each compile unit's top DIE (dwarf_units.ABSENT where absent): read
    from the mapping when dwarf_units knows the shape, else by pyelftools, whose errors propagate."""
    fast = dwarf_units.top_names(lib)
    if fast is not None:
        yield from fast
        return
    for unit in lib.elf.get_dwarf_info(relocate_dwarf_sections=False).iter_CUs():
        attributes = unit.get_top_DIE().attributes
        name, comp_dir = attributes.get("DW_AT_name"), attributes.get("DW_AT_comp_dir")
        yield (dwarf_units.ABSENT if name is None else name.value,
               dwarf_units.ABSENT if comp_dir is None else comp_dir.value)


def _text(value: object) -> str:
    """A DWARF string attribute's text; a name or directory of another form is malformed debug info."""
    if not isinstance(value, bytes):
        raise TypeError(f"a string attribute of form {type(value).__name__}")
    return value.decode("utf-8", "replace")


def _describe(paths: dict[str, set[str]]) -> str:
    shown = "; ".join(f"'{p}' in {', '.join(sorted(s))}" for p, s in list(paths.items())[:_MAX_SHOWN])
    more = f" and {len(paths) - _MAX_SHOWN} more" if len(paths) > _MAX_SHOWN else ""
    return f"{len(paths)} path(s) ({shown}{more})"
