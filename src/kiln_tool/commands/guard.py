"""`kiln guard ranks-script PACKAGE -o FILE`: the distributed check (kiln_tool/guard/ranks.py) as one file a job
puts beside its training script, set to check PACKAGE.

Every kiln-built package ships the check as ``<package>/_kiln/ranks.py``, but a rank that lacks the package
cannot run it from there; it still has the job's own files. So the job carries this copy and runs
``torchrun ... FILE`` (or imports it and calls ``check_ranks()``): standard library and torch only.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from pathlib import Path

HELP = "write the distributed check (every rank agrees on the package) as a standalone script for a job"

TEMPLATE = Path(__file__).resolve().parent.parent / "guard" / "ranks.py"
_PACKAGE_LINE = re.compile(r"^PACKAGE: str \| None = None$", re.MULTILINE)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="guard_command", metavar="WHAT", required=True)
    script = sub.add_parser("ranks-script", help=HELP, description=HELP)
    script.add_argument("package", metavar="PACKAGE", help="the import name of the package the job uses")
    script.add_argument("-o", "--output", type=Path, required=True, metavar="FILE",
                        help="where to write the script (e.g. kiln_ranks.py beside train.py)")


def ranks_script(package: str) -> str:
    """The check's source with PACKAGE set to ``package``."""
    source = TEMPLATE.read_text(encoding="utf-8")
    text, count = _PACKAGE_LINE.subn(f"PACKAGE: str | None = {package!r}", source, count=1)
    if count != 1:
        raise RuntimeError(f"{TEMPLATE} has no 'PACKAGE: str | None = None' line to set")
    return text


def execute(args: argparse.Namespace) -> int:
    package: str = args.package
    if not package or not all(part.isidentifier() for part in package.split(".")):
        print(f"kiln guard: {package!r} is not a package's import name (e.g. opkiln, my_ops)", file=sys.stderr)
        return 2
    output: Path = args.output
    if output.is_dir():
        print(f"kiln guard: {output} is a folder: name the file to write (e.g. {output / 'kiln_ranks.py'})",
              file=sys.stderr)
        return 2
    text = ranks_script(package)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{output.name}.", dir=output.parent if str(output.parent) else ".")
    except OSError as exc:
        print(f"kiln guard: cannot write into {output.parent}: {exc.strerror}", file=sys.stderr)
        return 2
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        Path(tmp).chmod(0o644)
        Path(tmp).replace(output)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        print(f"kiln guard: cannot write {output}: {exc.strerror}", file=sys.stderr)
        return 2
    print(output)
    return 0
