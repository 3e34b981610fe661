"""How long `kiln index` takes for 10,000 wheels (target: at most 3 s).

Makes 10,000 tiny synthetic wheels spread over the torch x CUDA x Python
combinations of src/kiln_tool/data/matrix.json (plus stable-ABI ones), then times:
  fresh  - index them all into an empty OUT (--repeat times; best and median);
  merge  - index one more wheel into that 10,000-wheel OUT (the append path), with every published
           wheel verified by sha256 (the default), and the files it wrote (target: O(new wheels));
  merge-sizes - the same with --trust-published-sizes (published files checked by size only);
  verify - the sha256 verification of the 10,000 published wheels alone (what the default costs);
  rerun  - the same DIST again (nothing new);
  release-before - today's release onto that index, wheels in the site folder: fetch the whole published
           site (manifest, every wheel and METADATA over loopback HTTP), merge 1 wheel, deploy it all;
  release-after  - the release with the wheels in storage (index/storage.py): fetch the manifest alone,
           check the listing, upload 1 wheel and its METADATA, read them back, render every page.
           The storage is an in-process stand-in for a bucket (a folder; its listing has sizes, no
           sha256, like S3's), so the time is kiln's own; a real storage adds its round trips
           (one listing per bucket or release tag, then 3 calls per uploaded file).
  Bytes a release downloads and uploads, before and after, are printed for both, measured; and projected
  for the issue's real sizes (a release of 162 wheels, about 125 MB).
Target for a merge without verification, and for release-after: under 1 s.
Wall time depends on the disk (creating 20,000 files) and on what else runs;
the CPU time printed beside it does not. The audit is left out (synthetic wheels have no extension to audit; the real
audit runs per new wheel in `kiln index`), and so is making the wheels.

    .venv/bin/python benchmarks/bench_index.py [--wheels N] [--tmp DIR] [--keep DIR]
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import resource
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import quote

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "tests"))

from index.synthetic_wheels import make_wheel  # noqa: E402
from kiln_tool.index import build_index  # noqa: E402
from kiln_tool.index.combos import TorchCatalog  # noqa: E402
from kiln_tool.index.fetch import fetch_site  # noqa: E402
from kiln_tool.index.manifest import load_manifest  # noqa: E402
from kiln_tool.index.publish import _check_published_files  # noqa: E402
from kiln_tool.index.storage import Stored  # noqa: E402

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


class FolderBucket:
    """A stand-in for a bucket, in-process (index/storage.py's protocol): objects are files of one folder;
    its listing reports sizes and no sha256 (as S3's list_objects_v2), its HEAD no checksum (bytes are read back).
    Never over an existing name (O_EXCL), like a conditional PUT."""

    backend = "s3"
    serves_metadata = True

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.read_back_bytes = 0
        self.uploaded_bytes = 0

    def where(self) -> str:
        return "s3:bench-bucket/"

    def stored_at(self, name: str) -> str:
        return f"s3:bench-bucket/{name}"

    def url(self, name: str) -> str:
        return f"https://wheels.example.invalid/{quote(name, safe='')}"

    def stat(self, name: str) -> Stored | None:
        try:
            return Stored(name, os.stat(self.folder / name).st_size, None)
        except FileNotFoundError:
            return None

    def read(self, name: str) -> bytes:
        data = (self.folder / name).read_bytes()
        self.read_back_bytes += len(data)
        return data

    def put(self, name: str, path: Path, sha256: str) -> None:
        data = path.read_bytes()
        fd = os.open(self.folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        self.uploaded_bytes += len(data)

    def listing(self, stored_at: str) -> dict[str, Stored] | None:
        if not stored_at.startswith(self.where()):
            return None
        with os.scandir(self.folder) as scan:
            return {e.name: Stored(e.name, e.stat().st_size, None) for e in scan}


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def _serve(directory: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), lambda *a, **kw: _Quiet(*a, directory=str(directory), **kw))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def _tree_bytes(root: Path) -> tuple[int, int]:
    """(bytes, files) under root."""
    total = count = 0
    for directory, _dirs, files in os.walk(root):
        for name in files:
            total += os.stat(os.path.join(directory, name)).st_size
            count += 1
    return total, count


def _mb(n: float) -> str:
    return f"{n / 1e6:,.2f} MB" if n >= 1e5 else f"{int(n):,} bytes"


def release_bench(root: Path, published_site: Path, catalog: TorchCatalog) -> tuple[float, float]:
    """release-before and release-after on the same published index; prints the bytes each moves."""
    new_dist = root / "release-dist"
    make_wheel(new_dist, version="9.9.11+pt213cpu")
    new_bytes = sum(p.stat().st_size for p in new_dist.iterdir())

    # Before: the site folder holds every wheel; a release fetches it all, merges, and deploys it all.
    server, url = _serve(published_site)
    try:
        stats: dict[str, int] = {}
        start = time.perf_counter()
        site = root / "release-before"
        fetch_site(url, site, stats=stats)
        fetched_s = time.perf_counter() - start
        build_index(new_dist, site, "https://example.invalid/wheels/", audit=None, catalog=catalog, render_all=True)
        before_s = time.perf_counter() - start
    finally:
        server.shutdown()
        server.server_close()
    before_down = stats["bytes"]
    deploy_before, files_before = _tree_bytes(site)
    assets_before = new_bytes  # the old release job also attached the new wheels as release assets
    print(f"release-before {before_s:6.2f} s wall ({fetched_s:.2f} s of it fetching {stats['listed']} wheels and "
          f"their METADATA over loopback HTTP)")
    print(f"       downloads {_mb(before_down)} (manifest + every wheel + METADATA); uploads "
          f"{_mb(deploy_before + assets_before)} (the whole site, {files_before} files, to Pages + the new wheel "
          f"as a release asset)")

    # After: the same wheels in storage (moved into the stand-in bucket), the published site is pages + manifest.
    bucket = root / "bucket"
    os.rename(published_site / "wheels", bucket)
    doc = json.loads((published_site / "kiln-index.json").read_text())
    storage = FolderBucket(bucket)
    for entry in doc["wheels"]:
        entry.update(url=storage.url(entry["filename"]), stored_at=storage.stored_at(entry["filename"]),
                     metadata_beside=True)
    (published_site / "kiln-index.json").write_text(json.dumps(doc, sort_keys=True))
    server, url = _serve(published_site)
    try:
        stats = {}
        start, before_ru = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
        site = root / "release-after"
        fetch_site(url, site, stats=stats)
        fetched_s = time.perf_counter() - start
        result = build_index(new_dist, site, "https://example.invalid/wheels/", audit=None, catalog=catalog,
                             storage=storage, render_all=True)
        after_s = time.perf_counter() - start
        after_ru = resource.getrusage(resource.RUSAGE_SELF)
    finally:
        server.shutdown()
        server.server_close()
    assert [w.filename for w in result.added] == [p.name for p in new_dist.iterdir()]
    assert not (site / "wheels").exists()
    deploy_after, files_after = _tree_bytes(site)
    user, system = after_ru.ru_utime - before_ru.ru_utime, after_ru.ru_stime - before_ru.ru_stime
    print(f"release-after  {after_s:6.2f} s wall, CPU {user:5.2f} s user + {system:5.2f} s system "
          f"({fetched_s:.2f} s of it fetching the manifest; {result.total} listed)")
    print(f"       downloads {_mb(stats['bytes'] + storage.read_back_bytes)} (the manifest, {_mb(stats['bytes'])}; "
          f"read-back of what it uploaded, {_mb(storage.read_back_bytes)}); uploads "
          f"{_mb(storage.uploaded_bytes + deploy_after)} (the new wheel + METADATA to storage, "
          f"{_mb(storage.uploaded_bytes)}; pages + manifest, {files_after} files, to Pages, {_mb(deploy_after)})")

    # The real sizes: one release = 162 wheels, about 125 MB (METADATA is a few KB each).
    per_entry = stats["bytes"] / result.total
    pages_per_wheel = deploy_after / result.total
    print("projected for real wheels (162 a release, 125 MB a release), after R releases of the matrix:")
    for releases in (1, 8, 62):
        listed = 162 * releases
        down_before, up_before = 125e6 * releases, 125e6 * (releases + 1) + pages_per_wheel * listed + 125e6
        down_after, up_after = per_entry * listed, 125e6 + pages_per_wheel * listed
        print(f"  R={releases:3d} ({listed:6,d} wheels listed): before downloads {_mb(down_before)}, uploads "
              f"{_mb(up_before)}; after downloads {_mb(down_after)} (the manifest), uploads {_mb(up_after)}")
    print("  (after: + the new wheels' bytes read back where the storage reports no sha256; release assets and S3 "
          "objects uploaded with their checksum report one, so nothing is read back)")
    return before_s, after_s


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
        _before_s, after_s = release_bench(root, out, catalog)
    print(f"merge of 1 wheel into {args.wheels} without verification: {merge_sizes:.2f} s "
          f"(target {MERGE_TARGET_S:.0f} s): {'ok' if merge_sizes <= MERGE_TARGET_S else 'TOO SLOW'}")
    print(f"release of 1 wheel onto {args.wheels} in storage, manifest-only fetch: {after_s:.2f} s "
          f"(target {MERGE_TARGET_S:.0f} s): {'ok' if after_s <= MERGE_TARGET_S else 'TOO SLOW'}")
    verdict = "ok" if fresh <= TARGET_S else "TOO SLOW"
    print(f"{args.wheels} wheels indexed in {fresh:.2f} s best, {median:.2f} s median of {len(runs)} "
          f"(target {TARGET_S:.0f} s): {verdict}")
    return 0 if fresh <= TARGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
