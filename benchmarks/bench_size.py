#!/usr/bin/env python3
"""Wheel and fatbin size, with and without fatbin compression, and the cost of each CUDA arch.

    python benchmarks/bench_size.py [--variant cu130] [--json PATH]

Builds the CUDA wheel twice (compression on, as shipped; and off) for the arch
list of src/kiln_tool/data/matrix.json and reads the fatbin of each with kiln audit's parser:
wheel size, _C size, .nv_fatbin size, and bytes per arch (SASS, and PTX for
the newest). Also reports the CPU wheel's size when dist/ holds one.
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import sys
import tempfile
import zipfile
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from elftools.elf.elffile import ELFFile  # noqa: E402

from kiln_tool.audit.fatbin import iter_entries  # noqa: E402
from kiln_tool.build_env import ensure_build_env  # noqa: E402
from kiln_tool.matrix_data import BuildSpec, local_builds  # noqa: E402
from kiln_tool.pipeline import build_wheel  # noqa: E402


def measure(wheel: Path) -> dict[str, Any]:
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.startswith("opkiln/_C") and n.endswith(".so")]
        so = zf.read(name)
    section = ELFFile(io.BytesIO(so)).get_section_by_name(".nv_fatbin")
    data = section.data() if section is not None else b""
    per_arch: dict[str, int] = defaultdict(int)
    for entry in iter_entries(data):
        per_arch[entry.name] += entry.size
    return {"wheel_bytes": wheel.stat().st_size, "so_bytes": len(so), "fatbin_bytes": len(data),
            "per_arch_bytes": dict(sorted(per_arch.items()))}


def build(python: Path, spec: BuildSpec, work: Path, label: str, compression: bool) -> Path:
    """The shipped build (kiln's pipeline.build_wheel), with or without fatbin compression."""
    extra = {} if compression else {"KILN_FATBIN_COMPRESSION": "off"}
    return build_wheel(python, spec, work / label, work / f"{label}.log", work / f"build-{label}", extra)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", default="cu130")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    (spec,) = [s for s in local_builds() if s.cuda == args.variant]
    work = Path(tempfile.mkdtemp(prefix="bench-size-"))
    python = ensure_build_env(spec, work / "venv.log")
    result: dict[str, Any] = {"benchmark": "size", "combination": spec.name}
    for label, compression in (("compressed", True), ("uncompressed", False)):
        wheel = build(python, spec, work, label, compression)
        result[label] = measure(wheel)
    comp, raw = result["compressed"], result["uncompressed"]
    result["fatbin_compression_ratio"] = round(comp["fatbin_bytes"] / raw["fatbin_bytes"], 3)
    result["wheel_compression_ratio"] = round(comp["wheel_bytes"] / raw["wheel_bytes"], 3)
    cpu = sorted((REPO / "dist").glob("opkiln-*+pt*cpu-*.whl"))
    if cpu:
        result["cpu_wheel"] = {"name": cpu[-1].name, "bytes": cpu[-1].stat().st_size}
    print(f"{'':18s}{'compressed':>14s}{'uncompressed':>14s}")
    for key in ("wheel_bytes", "so_bytes", "fatbin_bytes"):
        print(f"{key:18s}{comp[key]:>14,d}{raw[key]:>14,d}")
    for arch in raw["per_arch_bytes"]:
        print(f"  {arch:16s}{comp['per_arch_bytes'].get(arch, 0):>14,d}{raw['per_arch_bytes'][arch]:>14,d}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
