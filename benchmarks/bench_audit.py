"""How long `kiln audit` takes and how much memory it needs, beside `auditwheel show` on the same wheels.

    .venv/bin/python benchmarks/bench_audit.py [--size-mb 100] [--repeat 3] [--wheel W.whl ...] [--corpus]
                                                [--big TORCH_WHEEL]

--corpus: every wheel of the real-wheel corpus (tests/audit/corpus/expected.json, from its cache
$KILN_AUDIT_CORPUS or ~/.cache/opkiln/audit-corpus; tests/audit/test_real_wheels.py downloads them), plus
the largest real wheel at hand with a library of at least 400 MB: torch 2.14.1's own CUDA wheel (its
libtorch_cuda.so is 480 MiB; --big PATH, else pip's download of it into the corpus cache).
Without --wheel or --corpus it builds one: a tiny hardened extension module made big with a section of
random bytes (objcopy --add-section), so the wheel stays as big as its contents, plus a few
smaller libraries; every check reads all of it (RECORD hashes, ELF parsing, the build-path scan).

Each run is a fresh process (`scripts/kiln audit --json W`, then `auditwheel show W`, alternating, so
both see the same page cache and machine load, after one untimed run of each that writes both tools' bytecode
under a private PYTHONPYCACHEPREFIX and reads the wheel into the page cache); its wall time, peak RSS
(wait4's ru_maxrss) and CPU time (user + system) are measured, medians printed with the 1-minute load
average over the runs (the machine may be shared: compare ratios at the same load; the CPU time moves
less). The goals (issues 20, 36, 44): peak RSS at most 300 MB on any wheel, also one with a library of at
least 400 MB and the generated >= 1 GB one (--shaped --size-mb 1100), and kiln audit no slower than
auditwheel show, which checks less. auditwheel's own exit status is not judged (it refuses some wheels
it can still show).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

REPO = Path(__file__).resolve().parents[1]
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


def _shaped_library(work: Path, total_mb: int) -> bytes:
    """A library large in every way a section can be (issue 44), assembled from generated data (as + .incbin,
    never 1 GB of C) and one small compile unit with debug info: a .symtab/.strtab of 400k symbols with
    80-character names (40k of them exported, so .dynsym/.dynstr too), .rodata with build-machine paths every
    64 KiB among random bytes, a .debug_str of null-terminated strings after the unit's own, an .nv_fatbin
    container of cubin entries, and 3000 small sections; the three big sections share what the symbols (about
    45 MB) leave of `total_mb`."""
    share = max(1 << 20, ((total_mb << 20) - (45 << 20)) // 3)
    rodata = bytearray(os.urandom(share))
    for at in range(0, share - 256, 1 << 16):
        path = f"/home/ci/build/src/kernel_{at}.cpp\0".encode()
        rodata[at:at + len(path)] = path
    (work / "rodata.bin").write_bytes(rodata)
    del rodata
    line = b"".join(f"debug string {i:08d} of a generated compile unit\0".encode() for i in range(1024))
    with open(work / "debug.bin", "wb") as out:
        for _ in range(share // len(line)):
            out.write(line)
    entry_payload = 1 << 20
    entries = share // (entry_payload + 64)
    with open(work / "fatbin.bin", "wb") as out:
        out.write(struct.pack("<IHHQ", 0xBA55ED50, 1, 16, entries * (entry_payload + 64)))
        for i in range(entries):
            header = bytearray(64)
            struct.pack_into("<HHIQ", header, 0, 2, 0x101, 64, entry_payload)
            struct.pack_into("<I", header, 0x1C, (80, 90, 100, 120)[i % 4])
            out.write(bytes(header) + os.urandom(entry_payload))
    asm = [f'.section .rodata,"a"\n.incbin "{work / "rodata.bin"}"',
           f'.section .debug_str,"",@progbits\n.incbin "{work / "debug.bin"}"',  # not "MS": ld would merge them
           f'.section .nv_fatbin,"a"\n.balign 8\n.incbin "{work / "fatbin.bin"}"',
           '.text\n.globl PyInit_big\n.type PyInit_big,@function\nPyInit_big:\n xor %eax,%eax\n ret']
    asm += [f'.section .kiln_small_{i},"a"\n.byte {i % 256}' for i in range(3000)]
    symbols = [".data"]
    for i in range(400_000):
        name = f"kiln_generated_symbol_{i:08d}_" + "x" * 48
        symbols.append(f".globl {name}\n" + ("" if i % 10 == 0 else f".hidden {name}\n") + f"{name}:\n.byte 0")
    (work / "shaped.s").write_text("\n".join(asm + symbols) + "\n")
    # A compile unit with real debug info first: its .debug_info is small and valid, and the generated
    # .debug_str follows its own strings, so reading its DWARF means reading all of them.
    (work / "unit.c").write_text("int kiln_debug_unit(int x) { return x + 1; }\n")
    subprocess.run(["gcc", "-g", "-O1", "-fPIC", "-c", "-o", str(work / "unit.o"), str(work / "unit.c")], check=True)
    out_path = work / "shaped.so"
    subprocess.run(["gcc", "-shared", "-nostdlib", "-Wl,-z,noexecstack", "-Wl,--enable-new-dtags",
                    "-Wl,-rpath,$ORIGIN", "-o", str(out_path), str(work / "unit.o"), str(work / "shaped.s")],
                   check=True)
    for name in ("rodata.bin", "debug.bin", "fatbin.bin", "shaped.s", "unit.c", "unit.o"):
        (work / name).unlink()
    return out_path.read_bytes()


def build_wheel(work: Path, size_mb: int, shaped: bool = False) -> Path:
    main = _shaped_library(work, size_mb) if shaped else _library(work, "big.so", size_mb << 20)
    files = {f"big/big{SUFFIX}": main}
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
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED if shaped else zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return wheel


def measure(command: list[str], env: dict[str, str] | None = None) -> tuple[float, float, int, float]:
    """(wall seconds, peak RSS in MiB, exit status, CPU seconds: user + system, all its threads) of one run of
    `command` in a fresh process. On a shared machine the CPU time moves far less with the load than the wall
    time (a process waiting for a core is not charged)."""
    start = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - start, usage.ru_maxrss / 1024, child.returncode, usage.ru_utime + usage.ru_stime


def _auditwheel() -> str | None:
    found = Path(sys.executable).parent / "auditwheel"
    return str(found) if found.is_file() else shutil.which("auditwheel")


BIG_WHEEL = "torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl"


def corpus_wheels(big: Path | None) -> list[Path]:
    """The corpus wheels that are in its cache, then the big wheel (downloaded into the cache when missing)."""
    import json

    cache = Path(os.environ.get("KILN_AUDIT_CORPUS", Path.home() / ".cache" / "opkiln" / "audit-corpus"))
    entries = json.loads((REPO / "tests" / "audit" / "corpus" / "expected.json").read_text())["wheels"]
    wheels = []
    for entry in entries:
        if (cache / entry["file"]).is_file():
            wheels.append(cache / entry["file"])
        else:
            print(f"not in {cache}: {entry['file']} (tests/audit/test_real_wheels.py downloads it)", file=sys.stderr)
    if big is None and not (cache / BIG_WHEEL).is_file():
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                        "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64", "torch==2.14.1",
                        "-d", str(cache)], check=False)
    big = big or cache / BIG_WHEEL
    if big.is_file():
        wheels.append(big)
    else:
        print(f"no wheel with a library of at least 400 MB: {big} is missing", file=sys.stderr)
    return wheels


def _largest_member(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as zf:
        info = max(zf.infolist(), key=lambda i: i.file_size)
    return f"{Path(info.filename).name} {info.file_size / 2**20:.0f} MiB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--wheel", type=Path, action="append", default=[])
    parser.add_argument("--corpus", action="store_true", help="the real-wheel corpus and a >= 400 MB library")
    parser.add_argument("--big", type=Path, default=None, help="the wheel with a library of at least 400 MB")
    parser.add_argument("--build-into", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--shaped", action="store_true", help="the built library is large in every way a section "
                        "can be (symbol and string tables, .rodata, debug, fatbin, many small sections; issue 44): "
                        "use with --size-mb 1100 for the >= 1 GB case")
    args = parser.parse_args()
    auditwheel = _auditwheel()
    if auditwheel is None:
        print("auditwheel is not installed (pip install auditwheel): nothing to compare with", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-audit-") as tmp:
        wheels = args.wheel + (corpus_wheels(args.big) if args.corpus else [])
        if args.build_into is not None:
            print(build_wheel(args.build_into, args.size_mb, args.shaped))
            return 0
        if not wheels:
            # Built by another process: a child's peak RSS (wait4) starts from its parent's resident size at fork,
            # so the measuring process never holds the library's bytes.
            built = subprocess.run([sys.executable, __file__, "--build-into", tmp, "--size-mb", str(args.size_mb),
                                    *(["--shaped"] if args.shaped else [])], check=True, capture_output=True,
                                   text=True)
            wheels = [Path(built.stdout.strip().splitlines()[-1])]
        # Both tools run from compiled bytecode, as installed tools do: a shell with PYTHONDONTWRITEBYTECODE would
        # otherwise compile kiln's sources (from a checkout) on every run, auditwheel's (installed) never.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        table: list[str] = []
        for wheel in wheels:
            commands = {"kiln audit": [sys.executable, str(REPO / "scripts" / "kiln"), "audit", "--json", str(wheel)],
                        "auditwheel show": [auditwheel, "show", str(wheel)]}
            for command in commands.values():  # untimed: bytecode written, the wheel in the page cache for both
                measure(command, env)
            runs: dict[str, list[tuple[float, float, int, float]]] = {tool: [] for tool in commands}
            loads = [os.getloadavg()[0]]
            for _ in range(args.repeat):
                for tool, command in commands.items():
                    runs[tool].append(measure(command, env))
                loads.append(os.getloadavg()[0])
            size = wheel.stat().st_size / 2**20
            with zipfile.ZipFile(wheel) as zf:
                unpacked = sum(i.file_size for i in zf.infolist()) / 2**20
            print(f"{wheel.name}: {size:.1f} MiB ({unpacked:.0f} MiB unpacked; largest {_largest_member(wheel)}), "
                  f"{args.repeat} run(s) each after one untimed, alternating; 1-min load average "
                  f"{min(loads):.1f}-{max(loads):.1f}", flush=True)
            medians, peaks, cpus = {}, {}, {}
            for tool, results in runs.items():
                times = [r[0] for r in results]
                rss = [r[1] for r in results]
                medians[tool] = statistics.median(times)
                peaks[tool] = statistics.median(rss)
                cpus[tool] = statistics.median(r[3] for r in results)
                print(f"  {tool:16} median {statistics.median(times):7.2f} s (min {min(times):.2f}, max "
                      f"{max(times):.2f}), CPU {cpus[tool]:.2f} s; peak RSS median {peaks[tool]:7.1f} MiB (max "
                      f"{max(rss):.1f}); exit {sorted({r[2] for r in results})}")
            ratio = medians["kiln audit"] / medians["auditwheel show"]
            cpu_ratio = cpus["kiln audit"] / cpus["auditwheel show"]
            print(f"  kiln audit / auditwheel show: {ratio:.2f}x the time, {cpu_ratio:.2f}x the CPU", flush=True)
            table.append(f"| {wheel.name[:60]} | {medians['kiln audit']:.2f} s ({cpus['kiln audit']:.2f} s CPU) | "
                         f"{peaks['kiln audit']:.0f} MiB | {medians['auditwheel show']:.2f} s "
                         f"({cpus['auditwheel show']:.2f} s CPU) | {peaks['auditwheel show']:.0f} MiB | {ratio:.2f}x "
                         f"| {cpu_ratio:.2f}x | {min(loads):.1f}-{max(loads):.1f} |")
        print("\n| wheel | kiln audit | kiln peak RSS | auditwheel show | auditwheel peak RSS | time ratio | CPU ratio "
              "| load |")
        print("|---|---|---|---|---|---|---|---|")
        print("\n".join(table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
