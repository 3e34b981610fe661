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
    from ..repair import RepairError, check_wheel_input, repair_wheel

    # Every input is checked before the first repair: a bad one leaves -w as it was.
    try:
        if args.wheel_dir.exists() and not args.wheel_dir.is_dir():
            print(f"kiln repair: -w {args.wheel_dir}: exists and is not a directory", file=sys.stderr)
            return 2
        for wheel in args.wheels:
            if not wheel.exists():
                print(f"kiln repair: {wheel}: no such file", file=sys.stderr)
                return 2
            check_wheel_input(wheel)
        for wheel in args.wheels:
            repaired = repair_wheel(wheel, args.wheel_dir)
            print(repaired)
    except RepairError as exc:
        print(f"kiln repair: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0
