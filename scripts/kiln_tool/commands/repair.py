"""`kiln repair WHEEL -w DIR`: auditwheel repair, torch/CUDA excluded, manylinux floor enforced."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "repair wheels with auditwheel (torch and CUDA libraries excluded, torch's manylinux floor enforced)"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("wheels", nargs="+", type=Path, metavar="WHEEL")
    parser.add_argument("-w", "--wheel-dir", type=Path, required=True, help="where the repaired wheels go")


def execute(args: argparse.Namespace) -> int:
    import zipfile

    from ..repair import RepairError, repair_wheel

    for wheel in args.wheels:
        if not wheel.is_file():
            print(f"kiln repair: {wheel}: no such file", file=sys.stderr)
            return 2
        if wheel.suffix != ".whl" or not zipfile.is_zipfile(wheel):
            print(f"kiln repair: {wheel} is not a wheel file (a .whl zip archive)", file=sys.stderr)
            return 2
    for wheel in args.wheels:
        try:
            repaired = repair_wheel(wheel, args.wheel_dir)
        except RepairError as exc:
            print(f"kiln repair: {exc}", file=sys.stderr)
            return 1
        print(repaired)
    return 0
