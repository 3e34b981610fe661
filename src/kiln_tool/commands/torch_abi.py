"""kiln torch-abi: record the exported symbols of a torch wheel's libraries as data/torch_abi/<version>.json.

    kiln torch-abi TORCH_WHEEL [--extra WHEEL ...]    record one torch wheel (read, never installed)
    kiln torch-abi --runtime SITE_PACKAGES           record the libraries of the CUDA runtime wheels (nvidia-*,
                                                     cuda-toolkit) that torch's METADATA requires, as installed
                                                     with it there: data/torch_abi/runtime/<version>.json
    kiln torch-abi --for-wheels dist/*.whl           record the torch of each built wheel that is neither
                                                     recorded nor installed, downloading it (pip download
                                                     --no-deps) from the matrix's torch_index
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HELP = "record a torch wheel's library exports (for auditing against a torch that is not installed)"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("wheels", type=Path, nargs="*", metavar="WHEEL",
                        help="a torch wheel (pip download --no-deps torch==X); with --for-wheels: built wheels")
    parser.add_argument("--extra", type=Path, action="append", default=[], metavar="WHEEL",
                        help="another wheel whose libraries torch loads (e.g. the CUDA runtime); "
                        "repeatable")
    parser.add_argument("--runtime", type=Path, default=None, metavar="SITE_PACKAGES",
                        help="record torch's CUDA runtime wheels as installed in this site-packages")
    parser.add_argument("--for-wheels", action="store_true",
                        help="record the torch each built wheel's build info names, where missing")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="default: data/torch_abi ($KILN_TORCH_ABI_DIR)")


def execute(args: argparse.Namespace) -> int:
    import zipfile

    from kiln_tool.audit.errors import AuditInputError
    from kiln_tool.audit.torch_abi import TorchAbiError, data_dir
    from kiln_tool.torch_abi_records import record_needed_torches, record_torch_wheel

    out = args.out or data_dir()
    if bool(args.runtime) == bool(args.wheels):
        print("kiln torch-abi: pass torch wheels, or --runtime SITE_PACKAGES (not both)", file=sys.stderr)
        return 2
    try:
        if args.runtime is not None:
            from kiln_tool.audit.torch_abi import record_runtime, write_record

            record = record_runtime(args.runtime)
            if f"{record['torch_version']}.json" not in {p.name for p in out.glob("*.json")}:
                raise TorchAbiError(f"torch {record['torch_version']} is not recorded in {out}: record its wheel first")
            target = write_record(record, out)
            print(f"wrote {target} ({target.stat().st_size} bytes): {len(record['libraries'])} libraries of "
                  f"{', '.join(record['runtime_wheels'])}")
            return 0
        if not args.for_wheels:
            for wheel in args.wheels:
                record_torch_wheel(wheel, tuple(args.extra), out)
            return 0
        record_needed_torches(list(args.wheels), out, tuple(args.extra))
        return 0
    except (TorchAbiError, AuditInputError, OSError, zipfile.BadZipFile, ValueError) as exc:
        print(f"kiln torch-abi: {exc}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as exc:
        print(f"kiln torch-abi: downloading torch failed ({exc})", file=sys.stderr)
        return 2
