#!/usr/bin/env python3
"""Seconds per test file, from the junit XML of a run (`make test` writes build/junit-tests-*.xml), as
tests/lane_durations.json: the plan by which `make test`'s pytest lanes take the longest files first
(tests/support/lanes.py).

    lane_durations.py [--out FILE] JUNIT.xml [JUNIT.xml ...]

A test's time is its setup, call and teardown (pytest's junit default), so a session fixture counts in the file
whose test made it. Files are named relative to the repository, as the lanes name them; a classname that names no
file (a class inside one) is shortened until it does. The output is sorted and rounded to 0.1 s, written whole or
not at all. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MAX_XML_BYTES = 64 * 1024 * 1024


def file_of(classname: str, repo: Path = REPO) -> str | None:
    parts = classname.split(".")
    while parts:
        candidate = Path(*parts).with_suffix(".py")
        if (repo / candidate).is_file():
            return candidate.as_posix()
        parts.pop()
    return None


def durations(paths: list[Path], repo: Path = REPO) -> dict[str, float]:
    seconds: dict[str, float] = {}
    for path in paths:
        if path.stat().st_size > MAX_XML_BYTES:
            raise ValueError(f"{path}: larger than {MAX_XML_BYTES} bytes")
        for case in ET.parse(path).getroot().iter("testcase"):  # noqa: S314 - pytest's own report of this run
            file = file_of(case.get("classname", ""), repo)
            if file is None:
                continue
            try:
                value = float(case.get("time", "0"))
            except ValueError as exc:
                raise ValueError(f"{path}: testcase time {case.get('time')!r} is not a number") from exc
            if not value >= 0 or value == float("inf"):
                raise ValueError(f"{path}: testcase time {value} is not a duration")
            seconds[file] = seconds.get(file, 0.0) + value
    return {file: round(value, 1) for file, value in sorted(seconds.items())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "tests" / "lane_durations.json")
    parser.add_argument("junit", type=Path, nargs="+")
    args = parser.parse_args(argv)
    try:
        found = durations(args.junit)
    except (OSError, ValueError, ET.ParseError) as exc:
        print(f"lane_durations.py: {exc}", file=sys.stderr)
        return 2
    if not found:
        print("lane_durations.py: no test of this repository in " + " ".join(map(str, args.junit)), file=sys.stderr)
        return 2
    fd, tmp = tempfile.mkstemp(dir=args.out.parent, prefix=".lane_durations.")
    with os.fdopen(fd, "w") as out:
        out.write(json.dumps(found, indent=0) + "\n")
    Path(tmp).replace(args.out)
    print(f"lane_durations.py: {len(found)} files, {sum(found.values()):.0f} s, in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
