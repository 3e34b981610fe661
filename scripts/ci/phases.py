#!/usr/bin/env python3
"""CI's phases: `make test` runs two lanes at once (the suite, and the container pipeline) and
records how long each phase of each lane took, so the phase table CI is judged by comes from the run
itself.

    phases.py run --log FILE LANE PHASE -- COMMAND...   run COMMAND, each output line prefixed
                                                       "[LANE] ", and append one row to FILE
    phases.py table FILE                               the rows as a markdown table, with the wall
                                                       time of each lane and of the whole run

A row is JSON (lane, phase, start, seconds, rc). The exit status of `run` is COMMAND's. Standard
library only: it runs before any venv has its packages.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def _make_flags(flags: str) -> tuple[str, bool]:
    """The MAKEFLAGS a lane's own make gets (each lane runs its phases one at a time: no jobserver,
    whose descriptors do not reach it anyway), and whether this is `make -n`."""
    words = flags.split()
    dry_run = bool(words) and not words[0].startswith("-") and "n" in words[0]
    kept = [w for w in words if not w.startswith(("--jobserver", "-j"))]
    return " ".join(kept), dry_run


def run(log: Path, lane: str, phase: str, command: list[str]) -> int:
    if not command:
        print("phases.py run: no command after --", file=sys.stderr)
        return 2
    env = dict(os.environ)
    env["MAKEFLAGS"], dry_run = _make_flags(env.get("MAKEFLAGS", ""))
    prefix = f"[{lane}] ".encode()
    start = time.time()
    print(f"[{lane}] == {phase}: {' '.join(command)}", flush=True)
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env) as proc:
        assert proc.stdout is not None
        out = sys.stdout.buffer
        for line in proc.stdout:
            out.write(prefix + line)
            out.flush()
        rc = proc.wait()
    seconds = time.time() - start
    print(f"[{lane}] == {phase}: rc {rc} in {seconds:.0f} s", flush=True)
    if dry_run:
        return rc
    log.parent.mkdir(parents=True, exist_ok=True)
    row = {"lane": lane, "phase": phase, "start": start, "seconds": round(seconds, 1), "rc": rc}
    # One write of one short line in append mode: the two lanes' rows never interleave.
    with log.open("a") as fh:
        fh.write(json.dumps(row) + "\n")
    return rc


def table(log: Path) -> str:
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    if not rows:
        return "no phases recorded\n"
    lines = ["| lane | phase | start (s after the first) | time (s) | rc |", "|---|---|---|---|---|"]
    first = min(r["start"] for r in rows)
    for r in sorted(rows, key=lambda r: (r["lane"], r["start"])):
        lines.append(f"| {r['lane']} | {r['phase']} | {r['start'] - first:.0f} | {r['seconds']:.0f} | {r['rc']} |")
    for lane in sorted({r["lane"] for r in rows}):
        mine = [r for r in rows if r["lane"] == lane]
        wall = max(r["start"] + r["seconds"] for r in mine) - min(r["start"] for r in mine)
        lines.append(f"| {lane} | (lane, wall) | | {wall:.0f} | |")
    end = max(r["start"] + r["seconds"] for r in rows)
    lines.append(f"| all | (wall, both lanes) | | {end - first:.0f} | |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="phases.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_run = sub.add_parser("run")
    p_run.add_argument("--log", type=Path, required=True)
    p_run.add_argument("lane")
    p_run.add_argument("phase")
    p_run.add_argument("command", nargs=argparse.REMAINDER)
    p_table = sub.add_parser("table")
    p_table.add_argument("log", type=Path)
    args = parser.parse_args(argv)
    if args.cmd == "run":
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        return run(args.log, args.lane, args.phase, command)
    if not args.log.is_file():
        print(f"phases.py table: {args.log}: no such file", file=sys.stderr)
        return 2
    sys.stdout.write(table(args.log))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main(sys.argv[1:]))
