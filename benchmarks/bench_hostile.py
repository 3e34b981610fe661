"""A zip bomb against the kiln tools: a ~2 MB wheel holding 1 GiB of zeros must be refused with exit 2
in under 300 MB of RSS and under 3 s, by `kiln index`, `kiln audit` and `kiln repair`.

Two bombs are made (not timed): one whose central directory declares the 1 GiB honestly (refused
on the declared ratio, before inflating), and one that declares 1,000 bytes for the member (the
stream is refused as soon as it inflates past what was declared). Each kiln run is a subprocess;
its peak RSS is the child's ru_maxrss (os.wait4), its time the wall clock around it.

    .venv/bin/python benchmarks/bench_hostile.py [--gib 1] [--tmp DIR]
"""

from __future__ import annotations

import argparse
import os
import struct
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
KILN = REPO / "scripts" / "kiln"
sys.path.insert(0, str(REPO / "tests"))

from index.synthetic_wheels import make_wheel  # noqa: E402

RSS_LIMIT_MB = 300.0
TIME_LIMIT_S = 3.0
BOMB_MEMBER = "opkiln/zeros.bin"
LIED_SIZE = 1000


def make_bomb(directory: Path, gib: float) -> Path:
    """A kiln-shaped wheel (METADATA, build info) plus 1 MiB of random bytes and ``gib`` GiB of zeros."""
    wheel = make_wheel(directory, platform="manylinux_2_28_x86_64")
    chunk = bytes(1 << 20)
    with zipfile.ZipFile(wheel, "a", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(zipfile.ZipInfo("opkiln/padding.bin", date_time=(2026, 1, 1, 0, 0, 0)), os.urandom(1 << 20),
                    compress_type=zipfile.ZIP_STORED)
        info = zipfile.ZipInfo(BOMB_MEMBER, date_time=(2026, 1, 1, 0, 0, 0))
        info.compress_type = zipfile.ZIP_DEFLATED
        with zf.open(info, "w", force_zip64=False) as member:
            for _ in range(int(gib * 1024)):
                member.write(chunk)
    return wheel


def lie_about_size(wheel: Path, declared: int) -> None:
    """Patch the bomb member's uncompressed size, in its local header and in the central directory."""
    with zipfile.ZipFile(wheel) as zf:
        info = zf.getinfo(BOMB_MEMBER)
        central = zf.start_dir
    data = bytearray(wheel.read_bytes())
    struct.pack_into("<I", data, info.header_offset + 22, declared)
    name = BOMB_MEMBER.encode()
    at = data.index(b"PK\x01\x02", central)
    while data[at + 46:at + 46 + len(name)] != name:
        name_len, extra_len, comment_len = struct.unpack_from("<HHH", data, at + 28)
        at += 46 + name_len + extra_len + comment_len
    struct.pack_into("<I", data, at + 24, declared)
    wheel.write_bytes(bytes(data))


def run(label: str, args: list[str]) -> bool:
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, str(KILN), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    # communicate() reaps the child itself; wait4 on it first keeps its rusage.
    _pid, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    out = (proc.stdout.read() if proc.stdout else "") + (proc.stderr.read() if proc.stderr else "")
    code = os.waitstatus_to_exitcode(status)
    rss_mb = usage.ru_maxrss / 1024
    ok = code == 2 and rss_mb < RSS_LIMIT_MB and elapsed < TIME_LIMIT_S
    lines = [line.strip() for line in out.splitlines() if line.strip() and "nothing written" not in line]
    reason = lines[-1] if lines else ""
    print(f"{label:34s} exit {code}  {elapsed:5.2f} s  {rss_mb:6.1f} MB RSS  {'ok' if ok else 'FAIL'}")
    print(f"{'':34s} {reason.split(': ', 2)[-1][:110]}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0, help="zeros in the bomb (default 1 GiB)")
    parser.add_argument("--tmp", type=Path, default=None, help="where to make the bombs (default: $TMPDIR)")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-hostile-", dir=args.tmp) as tmp:
        root = Path(tmp)
        start = time.perf_counter()
        honest = make_bomb(root / "honest", args.gib)
        lying = make_bomb(root / "lying", args.gib)
        lie_about_size(lying, LIED_SIZE)
        print(f"made two {honest.stat().st_size / 2**20:.1f} MiB wheels holding {args.gib:g} GiB of zeros "
              f"in {time.perf_counter() - start:.1f} s (not timed)")
        for label, dist in (("declared sizes", honest.parent), (f"declared {LIED_SIZE} bytes", lying.parent)):
            wheel = next(dist.glob("*.whl"))
            results.append(run(f"kiln index ({label})", ["index", str(dist), str(root / f"site-{dist.name}")]))
            results.append(run(f"kiln audit ({label})", ["audit", str(wheel)]))
            results.append(run(f"kiln repair ({label})", ["repair", str(wheel), "-w", str(root / "repaired")]))
    verdict = all(results)
    print(f"limits: exit 2, under {RSS_LIMIT_MB:.0f} MB RSS, under {TIME_LIMIT_S:.0f} s: "
          f"{'ok' if verdict else 'FAILED'}")
    return 0 if verdict else 1


if __name__ == "__main__":
    raise SystemExit(main())
