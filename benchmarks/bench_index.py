"""How long `kiln index` takes for 10,000 wheels (target: at most 3 s).

Makes 10,000 tiny synthetic wheels spread over the torch x CUDA x Python
combinations of data/matrix.json (plus stable-ABI ones), then times:
  fresh  - index them all into an empty OUT (--repeat times; best and median);
  merge  - index one more wheel into that 10,000-wheel OUT (the append path), with every published
           wheel verified by sha256 (the default), and the files it wrote (target: O(new wheels));
  merge-sizes - the same with --trust-published-sizes (published files checked by size only);
  verify - the sha256 verification of the 10,000 published wheels alone (what the default costs);
  rerun  - the same DIST again (nothing new).
Target for a merge without verification: under 1 s.
Wall time depends on the disk (creating 20,000 files) and on what else runs;
the CPU time printed beside it does not. The audit is left out (synthetic wheels have no extension to audit; the real
audit runs per new wheel in `kiln index`), and so is making the wheels.

    .venv/bin/python benchmarks/bench_index.py [--wheels N] [--tmp DIR] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "tests"))

from index.synthetic_wheels import make_wheel  # noqa: E402
from kiln_tool.index import build_index  # noqa: E402
from kiln_tool.index.combos import TorchCatalog  # noqa: E402
from kiln_tool.index.manifest import load_manifest  # noqa: E402
from kiln_tool.index.publish import _check_published_files  # noqa: E402

TARGET_S = 3.0
MERGE_TARGET_S = 1.0


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


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under root: (inode, mtime) - a file written or replaced by a run changes one of them."""
    found = {}
    for directory, _dirs, files in os.walk(root):
        for name in files:
            st = os.stat(os.path.join(directory, name))
            found[os.path.join(directory, name)] = (st.st_ino, st.st_mtime_ns)
    return found


def written(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> int:
    return sum(1 for path, key in after.items() if before.get(path) != key)


def timed(label: str, dist: Path, out: Path, catalog: TorchCatalog, verify: bool = True) -> float:
    start, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    result = build_index(dist, out, "https://example.invalid/wheels/", audit=None, catalog=catalog,
                         verify_published=verify)
    elapsed, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
    user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    print(f"{label:11s} {elapsed:6.2f} s wall, CPU {user:5.2f} s user + {system:5.2f} s system  "
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
        dist, out, extra, extra2 = root / "dist", root / "site", root / "extra", root / "extra2"
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
        files = snapshot(out)
        timed("merge", extra, out, catalog)
        print(f"       wrote {written(files, snapshot(out))} file(s) into the {len(files)}-file site")
        make_wheel(extra2, version="9.9.10+pt213cpu")
        files = snapshot(out)
        merge_sizes = timed("merge-sizes", extra2, out, catalog, verify=False)
        print(f"       wrote {written(files, snapshot(out))} file(s) into the {len(files)}-file site")
        manifest = load_manifest(out)
        assert manifest is not None
        start = time.perf_counter()
        _check_published_files(out, manifest, verify=True)
        verify_s = time.perf_counter() - start
        start = time.perf_counter()
        _check_published_files(out, manifest, verify=False)
        sizes_s = time.perf_counter() - start
        print(f"verify {verify_s:6.2f} s wall for sha256 of {len(manifest.wheels)} published wheels "
              f"(+ METADATA); {sizes_s:.2f} s for sizes only")
        timed("rerun", dist, out, catalog)
        if args.keep:
            shutil.rmtree(args.keep, ignore_errors=True)
            shutil.copytree(out, args.keep)
    print(f"merge of 1 wheel into {args.wheels} without verification: {merge_sizes:.2f} s "
          f"(target {MERGE_TARGET_S:.0f} s): {'ok' if merge_sizes <= MERGE_TARGET_S else 'TOO SLOW'}")
    verdict = "ok" if fresh <= TARGET_S else "TOO SLOW"
    print(f"{args.wheels} wheels indexed in {fresh:.2f} s best, {median:.2f} s median of {len(runs)} "
          f"(target {TARGET_S:.0f} s): {verdict}")
    return 0 if fresh <= TARGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
