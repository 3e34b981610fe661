"""``python -m opkiln doctor [--json]``: check this environment for opkiln; exit 1 when a problem is found."""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m opkiln", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    doctor = commands.add_parser("doctor", help="report Python, torch, CUDA, GPUs and opkiln's build; give a verdict "
                                                "and the exact fix")
    doctor.add_argument("--json", action="store_true", help="machine-readable report (schema in the 'schema' field)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from . import _doctor, package_import_error

    return _doctor.main(json_output=args.json, package_error=package_import_error)


if __name__ == "__main__":
    sys.exit(main())
