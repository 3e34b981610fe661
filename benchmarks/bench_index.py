"""How long `kiln index` takes for 10,000 wheels (target: at most 3 s).

Makes 10,000 tiny synthetic wheels spread over the torch x CUDA x Python
combinations of data/matrix.json (plus stable-ABI ones), then times:
  fresh  - index them all into an empty OUT (--repeat times; best and median);
  merge  - index one more wheel into that 10,000-wheel OUT (the append path);
  rerun  - the same DIST again (nothing new).
Wall time depends on the disk (creating 20,000 files) and on what else runs;
the CPU time printed beside it does not. The audit is left out (synthetic wheels have no extension to audit; the real
audit runs per new wheel in `kiln index`), and so is making the wheels.

    .venv/bin/python benchmarks/bench_index.py [--wheels N] [--tmp DIR] [--keep DIR]
"""

from __future__ import annotations

import argparse
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO / "tests"))

from index.synthetic_wheels import make_wheel  # noqa: E402
from kiln_tool.index import build_index  # noqa: E402
from kiln_tool.index.combos import TorchCatalog  # noqa: E402

TARGET_S = 3.0


def make_wheels(dist: Path, count: int, catalog: TorchCatalog) -> None:
    combos = []
    for version, variants in catalog.releases:
        minor = ".".join(version.split(".")[:2])
        major_s, minor_s = minor.split(".")
        for cuda in sorted(variants):
            combos.append((minor, major_s + minor_s, cuda))
    pythons = [p.replace(".", "") for p in catalog.pythons]
    platforms = ["manylinux_2_28_x86_64", "manylinux_2_28_aarch64"]
    made = 0
    build = 0
    while made < count:
        build += 1
        for minor, digits, cuda in combos:
            for py in pythons:
                for platform in platforms:
                    if made >= count:
                        return
                    version = f"0.{build}.0+pt{digits}{cuda}"
                    make_wheel(dist, version=version, python_tag=f"cp{py}", platform=platform, cuda_tag=cuda,
                               torch_major_minor=minor,
                               torch_requirement=f"torch<{minor.split('.')[0]}.{int(minor.split('.')[1]) + 1},"
                                                 f">={minor}")
                    made += 1
        for cuda in ("cpu", "cu126", "cu130"):
            if made >= count:
                return
            make_wheel(dist, version=f"0.{build}.0+{cuda}", python_tag="cp310", abi_mode="stable", cuda_tag=cuda,
                       torch_major_minor="2.13", torch_requirement="torch>=2.13",
                       platform="manylinux_2_28_x86_64")
            made += 1


def timed(label: str, dist: Path, out: Path, catalog: TorchCatalog) -> float:
    start, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    result = build_index(dist, out, "https://example.invalid/wheels/", audit=None, catalog=catalog)
    elapsed, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
    user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    print(f"{label:6s} {elapsed:6.2f} s wall, CPU {user:5.2f} s user + {system:5.2f} s system  "
          f"({len(result.added)} new, {result.total} listed, {len(result.combos)} combinations)")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheels", type=int, default=10_000)
    parser.add_argument("--keep", type=Path, default=None, help="leave the site here to look at")
    parser.add_argument("--repeat", type=int, default=3, help="fresh runs to time (the best and median print)")
    parser.add_argument("--tmp", type=Path, default=None, help="where to make DIST and OUT (default: $TMPDIR)")
    args = parser.parse_args()
    catalog = TorchCatalog.from_matrix()
    with tempfile.TemporaryDirectory(prefix="bench-index-", dir=args.tmp) as tmp:
        root = Path(tmp)
        dist, out, extra = root / "dist", root / "site", root / "extra"
        start = time.perf_counter()
        make_wheels(dist, args.wheels, catalog)
        print(f"made {args.wheels} synthetic wheels in {time.perf_counter() - start:.1f} s (not timed)")
        runs = []
        for i in range(args.repeat):
            if i:
                shutil.rmtree(out)
            runs.append(timed("fresh", dist, out, catalog))
        fresh = min(runs)
        median = sorted(runs)[len(runs) // 2]
        make_wheel(extra, version="9.9.9+pt213cpu")
        timed("merge", extra, out, catalog)
        timed("rerun", dist, out, catalog)
        if args.keep:
            shutil.rmtree(args.keep, ignore_errors=True)
            shutil.copytree(out, args.keep)
    verdict = "ok" if fresh <= TARGET_S else "TOO SLOW"
    print(f"{args.wheels} wheels indexed in {fresh:.2f} s best, {median:.2f} s median of {len(runs)} "
          f"(target {TARGET_S:.0f} s): {verdict}")
    return 0 if fresh <= TARGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
