"""build-paths: no path of the build machine inside the binary (strings, debug info, fatbin)."""

from __future__ import annotations

import bisect
import re
from functools import cache

from .. import fatbin
from ..context import LibraryContext
from ..report import CheckResult, failed, passed

# Bytes that may be part of a path; a marker preceded by one of them is inside a relative path.
_PATH_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-+~/@")
_MAX_SHOWN = 4


def _string_at(data: bytes, start: int) -> str:
    end = start
    limit = min(len(data), start + 200)
    while end < limit and 0x20 <= data[end] < 0x7F:
        end += 1
    return data[start:end].decode("ascii", errors="replace")


_COMPONENT = rb"[A-Za-z0-9._+~@-]+/"


@cache
def _pattern(markers: tuple[bytes, ...]) -> re.Pattern[bytes]:
    # One alternation: the regex engine scans 100 MB in tens of milliseconds, a find() per marker
    # takes ten times longer. "/tmp/*/" stands for /tmp/<dir>/.
    parts = [re.escape(m[:-2]) + _COMPONENT if m.endswith(b"*/") else re.escape(m)
             for m in sorted(markers, key=len, reverse=True)]
    return re.compile(b"|".join(parts))


def find_build_paths(data: bytes, markers: tuple[bytes, ...]) -> list[tuple[int, str]]:
    """(offset, path) of every marker that starts an absolute path followed by more path."""
    hits: dict[int, str] = {}
    for match in _pattern(markers).finditer(data):
        start, after = match.start(), match.end()
        if (start == 0 or data[start - 1] not in _PATH_BYTES) and after < len(data) and data[after] in _PATH_BYTES:
            hits.setdefault(start, _string_at(data, start))
    return sorted(hits.items())


def check_build_paths(ctx: LibraryContext) -> CheckResult:
    markers = ctx.artifact.resolver.policy.build_path_markers
    sections = sorted(ctx.lib.allocated_sections(), key=lambda s: s[1])
    starts = [s[1] for s in sections]

    def section_at(offset: int) -> str:
        i = bisect.bisect_right(starts, offset) - 1
        if i >= 0 and offset < sections[i][1] + sections[i][2]:
            return sections[i][0] or "?"
        return "headers"

    found: dict[str, set[str]] = {}
    for offset, path in find_build_paths(ctx.data, markers):
        found.setdefault(path, set()).add(section_at(offset))
    fatbin_data = ctx.lib.section_data(".nv_fatbin")
    if fatbin_data:
        try:
            for entry in fatbin.iter_entries(fatbin_data):
                if entry.compressed:
                    payload = fatbin.payload(fatbin_data, entry)
                    for _, path in find_build_paths(payload, markers):
                        found.setdefault(path, set()).add(f".nv_fatbin {entry.name}")
        except fatbin.FatbinError:
            pass  # cuda-sass reports a malformed fatbin
    if found:
        shown = "; ".join(f"'{p}' in {', '.join(sorted(s))}" for p, s in list(found.items())[:_MAX_SHOWN])
        more = f" and {len(found) - _MAX_SHOWN} more" if len(found) > _MAX_SHOWN else ""
        return failed("build-paths", f"{ctx.member} embeds {len(found)} build-machine path(s): {shown}{more}.",
                      "map paths out at compile time (-ffile-prefix-map=<src>=<name>, for nvcc via -Xcompiler), "
                      "build without -g/-lineinfo for release or strip debug info, keep RPATHs $ORIGIN-relative, "
                      "and avoid __FILE__ in messages.")
    return passed("build-paths", "no build-machine paths")
