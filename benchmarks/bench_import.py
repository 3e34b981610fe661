#!/usr/bin/env python3
"""Time `import opkiln` on top of an already imported torch, in fresh processes.

    python benchmarks/bench_import.py [--runs 25] [--python PATH] [--json PATH]

Each run is a new interpreter that imports torch first (not timed), then times
`import opkiln` alone with perf_counter: the cost users pay for our ops. The
figure is the median over the runs. Target (issue 8): at most 20 ms.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

TARGET_MS = 20.0
PROBE = (
    "import time, torch\n"
    "t0 = time.perf_counter()\n"
    "import opkiln\n"
    "t1 = time.perf_counter()\n"
    "print(f'{(t1 - t0) * 1e3:.4f}', opkiln.__version__)\n"
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=25)
    parser.add_argument("--python", default=sys.executable, help="interpreter with torch and opkiln installed")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    if args.runs < 20:
        parser.error("--runs must be at least 20")
    samples: list[float] = []
    version = ""
    for _ in range(args.runs):
        proc = subprocess.run([args.python, "-c", PROBE], capture_output=True, text=True, cwd="/")
        if proc.returncode != 0:
            print(f"import failed:\n{proc.stderr}", file=sys.stderr)
            return 2
        ms, version = proc.stdout.split()
        samples.append(float(ms))
    median = statistics.median(samples)
    result = {"benchmark": "import", "opkiln": version, "runs": args.runs, "median_ms": round(median, 3),
              "min_ms": round(min(samples), 3), "max_ms": round(max(samples), 3), "target_ms": TARGET_MS,
              "meets_target": median <= TARGET_MS}
    print(f"import opkiln after torch: median {median:.2f} ms over {args.runs} fresh processes "
          f"(min {min(samples):.2f}, max {max(samples):.2f}); target <= {TARGET_MS:.0f} ms: "
          f"{'met' if result['meets_target'] else 'MISSED'}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
