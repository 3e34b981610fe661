"""How long `kiln audit` takes on a big wheel (the goal: a 100 MB wheel in at most 2 s).

    .venv/bin/python benchmarks/bench_audit.py [--size-mb 100] [--repeat 5] [--wheel W.whl ...]

Without --wheel it builds one: a tiny hardened extension module made big with a section of
random bytes (objcopy --add-section), so the wheel stays as big as its contents, plus a few
smaller libraries; every check reads all of it (RECORD hashes, ELF parsing, the build-path scan).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from kiln_tool.audit import AuditOptions, audit_paths

SOURCE = """
__attribute__((visibility("default"))) void *PyInit_big(void) { return 0; }
int kiln_hidden(int x) { return x + 1; }
"""
SMALL_SOURCE = "int kiln_hidden(int x) { return x + 1; }\n"
SUFFIX = f".cpython-{sys.version_info.major}{sys.version_info.minor}-x86_64-linux-gnu.so"


def _library(work: Path, name: str, blob_bytes: int) -> bytes:
    src = work / f"{name}.c"
    src.write_text(SOURCE if blob_bytes else SMALL_SOURCE)
    out = work / name
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-fvisibility=hidden", "-Wl,-z,noexecstack",
                    "-Wl,--enable-new-dtags", "-Wl,-rpath,$ORIGIN", "-o", str(out), src.name], cwd=work, check=True)
    if blob_bytes:
        blob = work / "blob.bin"
        blob.write_bytes(os.urandom(blob_bytes))
        subprocess.run(["objcopy", "--add-section", f".kiln_blob={blob}", str(out)], check=True)
    return out.read_bytes()


def build_wheel(work: Path, size_mb: int) -> Path:
    files = {f"big/big{SUFFIX}": _library(work, "big.so", size_mb << 20)}
    for i in range(3):
        files[f"big/libsmall{i}.so"] = _library(work, f"small{i}.so", 0)
    files["big/__init__.py"] = b""
    dist = "big-1.0.dist-info"
    files[f"{dist}/METADATA"] = b"Metadata-Version: 2.1\nName: big\nVersion: 1.0\n"
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    files[f"{dist}/WHEEL"] = f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: {tag}-{tag}-linux_x86_64\n".encode()
    lines = []
    for name, data in sorted(files.items()):
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines.append(f"{name},sha256={digest},{len(data)}")
    files[f"{dist}/RECORD"] = ("\n".join([*lines, f"{dist}/RECORD,,"]) + "\n").encode()
    wheel = work / f"big-1.0-{tag}-{tag}-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return wheel


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--wheel", type=Path, action="append", default=[])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-audit-") as tmp:
        wheels = args.wheel or [build_wheel(Path(tmp), args.size_mb)]
        for wheel in wheels:
            times = []
            report = None
            for _ in range(args.repeat):
                start = time.perf_counter()
                report = audit_paths([wheel], AuditOptions())
                times.append(time.perf_counter() - start)
            assert report is not None
            size = wheel.stat().st_size / 2**20
            failed = sorted({c.id for _, _, c in report.failures()})
            print(f"{wheel.name}: {size:.1f} MiB, audit median {statistics.median(times):.3f} s, "
                  f"min {min(times):.3f} s, max {max(times):.3f} s over {args.repeat} runs "
                  f"({size / statistics.median(times):.0f} MiB/s); failed checks: {', '.join(failed) or 'none'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
