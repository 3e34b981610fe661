#!/usr/bin/env python3
"""Set-up cost of the README's first command: `make wheels` on a fresh clone, cold and warm.

    python benchmarks/bench_setup.py [--source REPO] [--rev HEAD] [--command "make wheels"]
                                     [--work /tmp] [--keep] [--json PATH]

Runs, one after the other, each in its own fresh `git clone` of --source at --rev under
--work (no .venv, no .venvs/, no build/, no dist/: a clone holds committed files only):

  cold   the caches this command can fill are new, empty folders: PIP_CACHE_DIR,
         UV_CACHE_DIR, CCACHE_DIR and XDG_CACHE_HOME (so the Makefile's own uv download
         too). What stays is the machine itself: its Pythons, its system packages and
         its local wheel folders (pip's configuration here: /opt/wheels, /opt/pypi);
  warm   a second fresh clone with the caches the cold run left behind (a new clone
         on a machine that has run the command once);
  again  the same command once more in the warm clone (nothing to do).

It prints each wall time and the load average (1 min) before and after each run,
since the machine may be shared. The clones are deleted at the end unless --keep.
Target (issue 21): `make wheels` cold <= 120 s.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET_COLD_S = 120.0
CACHE_VARS = ("PIP_CACHE_DIR", "UV_CACHE_DIR", "CCACHE_DIR", "XDG_CACHE_HOME")


def load1() -> float:
    return os.getloadavg()[0]


def clone(source: Path, rev: str, dest: Path) -> None:
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(source), str(dest)], check=True)
    subprocess.run(["git", "-C", str(dest), "checkout", "--quiet", rev], check=True)


def timed(command: str, cwd: Path, env: dict[str, str], log: Path) -> tuple[float, int]:
    started = time.perf_counter()
    with log.open("w") as fh:
        proc = subprocess.run(shlex.split(command), cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT)
    return time.perf_counter() - started, proc.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", type=Path, default=REPO, help="repository to clone (default: this one)")
    parser.add_argument("--rev", default="HEAD", help="commit to check out (default: HEAD; only committed files)")
    parser.add_argument("--command", default="make wheels")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--keep", action="store_true", help="keep the clones and caches")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    rev = subprocess.run(["git", "-C", str(args.source), "rev-parse", args.rev], capture_output=True, text=True,
                         check=False)
    if rev.returncode != 0:
        print(f"bench_setup: {args.source} has no commit {args.rev!r}: {rev.stderr.strip()}", file=sys.stderr)
        return 2
    commit = rev.stdout.strip()
    root = Path(tempfile.mkdtemp(prefix="opkiln-bench-setup-", dir=args.work))
    caches = root / "caches"
    env = {k: v for k, v in os.environ.items() if k not in CACHE_VARS and not k.startswith("OPKILN_")}
    for var in CACHE_VARS:
        (caches / var.lower()).mkdir(parents=True)
        env[var] = str(caches / var.lower())

    print(f"bench_setup: `{args.command}` on fresh clones of {args.source} at {commit[:12]}, under {root}")
    print(f"  {os.cpu_count()} cores; caches: {', '.join(CACHE_VARS)} -> {caches}/ (empty for the cold run)")
    results: list[dict[str, object]] = []
    try:
        for name, fresh in (("cold", True), ("warm", True), ("again", False)):
            work = root / ("clone-cold" if name == "cold" else "clone-warm")
            if fresh:
                clone(args.source, commit, work)
            before = load1()
            seconds, rc = timed(args.command, work, env, root / f"{name}.log")
            after = load1()
            results.append({"run": name, "seconds": round(seconds, 1), "exit": rc,
                            "load1_before": before, "load1_after": after})
            print(f"  {name:<5} {seconds:7.1f} s  exit {rc}  load(1 min) {before:.2f} -> {after:.2f}"
                  f"  log {root / f'{name}.log'}")
            if rc != 0:
                print((root / f"{name}.log").read_text(errors="replace")[-3000:], file=sys.stderr)
                break
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    cold = next((r for r in results if r["run"] == "cold"), None)
    ok = all(r["exit"] == 0 for r in results) and len(results) == 3
    if cold is not None and ok and args.command == "make wheels":
        verdict = "meets" if float(str(cold["seconds"])) <= TARGET_COLD_S else "misses"
        print(f"  cold {cold['seconds']} s {verdict} the target of {TARGET_COLD_S:.0f} s")
    if args.json:
        args.json.write_text(json.dumps({"commit": commit, "command": args.command, "cores": os.cpu_count(),
                                         "target_cold_s": TARGET_COLD_S, "runs": results}, indent=2) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
