"""``python -m <package>._kiln doctor [--json] [--ranks ...]``: check this environment for the package; exit 1
when a problem is found."""

from __future__ import annotations

import argparse
import sys

from .buildinfo import PACKAGE


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog or f"python -m {PACKAGE}._kiln",
                                     description=f"check this environment for {PACKAGE}; exit 1 on a problem")
    commands = parser.add_subparsers(dest="command", required=True)
    doctor = commands.add_parser("doctor", help=f"report Python, torch, CUDA, GPUs and {PACKAGE}'s build; give a "
                                                "verdict and the exact fix")
    doctor.add_argument("--json", action="store_true", help="machine-readable report (schema in the 'schema' field)")
    doctor.add_argument("--ranks", action="store_true",
                        help="the distributed check: every rank of a torchrun job compares its answer (see "
                             "docs/distributed-check.md); the arguments after --ranks are its own")
    return parser


def main(argv: list[str] | None = None, package_error: BaseException | None = None, prog: str | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--ranks" in argv:
        # Everything after --ranks belongs to the distributed check (imported only when asked for).
        at = argv.index("--ranks")
        build_parser(prog).parse_args(argv[:at + 1])
        from . import ranks

        return int(ranks.main(PACKAGE, argv[at + 1:]))
    args = build_parser(prog).parse_args(argv)
    if package_error is None:
        from . import guard

        package_error = guard.import_error
    from . import doctor

    return doctor.main(json_output=args.json, package_error=package_error)


if __name__ == "__main__":
    sys.exit(main())
