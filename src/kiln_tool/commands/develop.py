"""`kiln develop`: an editable install of the project, with its guard, for the edit-build-test loop."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HELP = ("editable install into this venv (or --python's) with kiln's guard; kiln builds rebuild on import, "
        "a backend build on the next kiln develop")


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--python", type=Path, default=None,
                        help="the Python of the venv to install into (default: the one kiln runs in)")


def execute(args: argparse.Namespace) -> int:
    from ..develop import DevelopError, develop
    from ..project import current_project

    project = current_project()
    python = args.python or Path(sys.executable)
    started = time.perf_counter()
    try:
        done = develop(project, python, project.root / "build" / "logs" / "develop.log")
    except DevelopError as exc:
        print(f"kiln develop: {exc}", file=sys.stderr)
        return 1
    for line in done:
        print(f"kiln develop: {line}")
    print(f"kiln develop: {time.perf_counter() - started:.1f} s")
    return 0
