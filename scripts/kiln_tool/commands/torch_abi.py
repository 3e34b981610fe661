"""kiln torch-abi: record the exported symbols of a torch wheel's libraries as data/torch_abi/<version>.json."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "record a torch wheel's library exports (for auditing against a torch that is not installed)"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("wheel", type=Path, metavar="TORCH_WHEEL",
                        help="a torch wheel (pip download --no-deps torch==X); read, never installed")
    parser.add_argument("--extra", type=Path, action="append", default=[], metavar="WHEEL",
                        help="another wheel whose libraries torch loads (e.g. the CUDA runtime); "
                        "repeatable")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="default: data/torch_abi ($OPKILN_TORCH_ABI_DIR)")


def execute(args: argparse.Namespace) -> int:
    import zipfile

    from kiln_tool.audit.torch_abi import TorchAbiError, data_dir, record_wheel, write_record

    try:
        record = record_wheel(args.wheel, tuple(args.extra))
    except (TorchAbiError, OSError, zipfile.BadZipFile) as exc:
        print(f"kiln torch-abi: {args.wheel}: {exc}", file=sys.stderr)
        return 2
    target = write_record(record, args.out or data_dir())
    counts = ", ".join(f"{Path(m).name} {e['count']}" for m, e in record["libraries"].items())
    print(f"wrote {target} ({target.stat().st_size} bytes): torch {record['torch_version']}; {counts}")
    return 0
