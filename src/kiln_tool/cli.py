"""Entry point of `kiln` (the torch-kiln console script, and `scripts/kiln` in a checkout): argparse
subcommands, one module each.

    kiln [-C DIR] COMMAND ...   every command serves the project of the current directory ([tool.kiln] of its
                                pyproject.toml); -C DIR changes into DIR first, as git -C and make -C do
    kiln --cmake-dir            the folder of kiln's CMake package (-DKiln_DIR=$(kiln --cmake-dir))
    kiln --version

Exit codes: 0 success, 1 a check failed (audit, repro), 2 unusable input or usage.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from types import ModuleType

# command name -> module under kiln_tool.commands
COMMANDS: dict[str, str] = {
    "matrix": "matrix",
    "wheels": "wheels",
    "sdist": "sdist",
    "develop": "develop",
    "label": "label",
    "repair": "repair",
    "audit": "audit",
    "index": "index",
    "repro": "repro",
    "torch-abi": "torch_abi",
    "new-op": "new_op",
    "torch-runtime": "torch_runtime",
    "cibuildwheel": "cibuildwheel",
    "release": "release",
    "release-rehearsal": "release_rehearsal",
    "venv": "venv",
    "guard": "guard",
    "verify": "verify",
}


def _load(name: str) -> ModuleType:
    return importlib.import_module(f"kiln_tool.commands.{COMMANDS[name]}")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="kiln", description="kiln: build, repair, audit, index and reproduce PyTorch operator wheels of the "
                                 "project in the current directory (its [tool.kiln] table)")
    parser.add_argument("-C", dest="directory", metavar="DIR", default=None,
                        help="run as if kiln were started in DIR (the project's folder)")
    parser.add_argument("--cmake-dir", action="store_true",
                        help="print the folder of kiln's CMake package (for -DKiln_DIR=...) and exit")
    parser.add_argument("--version", action="version", version=f"kiln {__version__} (torch-kiln)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        if only is not None and name != only:
            sub.add_parser(name, add_help=False)
            continue
        try:
            module = _load(name)
        except ModuleNotFoundError as exc:
            if exc.name != f"kiln_tool.commands.{COMMANDS[name]}":
                raise
            continue
        cmd = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.configure_parser(cmd)
        cmd.set_defaults(_module=module)
    return parser


def command_name(argv: list[str]) -> str | None:
    """The command word of ``argv``, past the global options (-C DIR, -CDIR, --cmake-dir)."""
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "-C":
            i += 2
        elif word.startswith("-C") or word == "--cmake-dir":
            i += 1
        else:
            return word if word in COMMANDS else None
    return None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Import only the module of the command being run.
    parser = build_parser(command_name(argv))
    args = parser.parse_args(argv)
    if args.directory is not None:
        try:
            os.chdir(args.directory)
        except OSError as exc:
            print(f"kiln: -C {args.directory}: {exc.strerror}", file=sys.stderr)
            return 2
    if args.cmake_dir:
        from .resources import cmake_dir

        print(cmake_dir())
        return 0
    module = getattr(args, "_module", None)
    if module is None:
        parser.print_help(sys.stderr if args.command is None else sys.stdout)
        return 2
    try:
        return int(module.execute(args))
    except KeyboardInterrupt:
        print("kiln: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # the promise: malformed input never ends in a traceback
        # A ProjectError can only come from kiln_tool.project once it is loaded: a command that never reads the
        # project (kiln audit) does not import it (tomllib, the schema reader) just to name the exception.
        project = sys.modules.get(f"{__package__}.project")
        if project is not None and isinstance(exc, project.ProjectError):
            for line in exc.problems:
                print(f"kiln {args.command}: {line}", file=sys.stderr)
            return int(exc.exit_code)
        if os.environ.get("KILN_DEBUG"):
            raise
        return _report_unexpected(args, exc)


def _report_unexpected(args: argparse.Namespace, exc: Exception) -> int:
    """Exit 2 with one line (or, for --json, one JSON error document) for an error no command handled."""
    detail = " ".join(str(exc).split()) or "(no detail)"
    if len(detail) > 300:
        detail = detail[:297] + "..."
    line = f"kiln {args.command}: cannot use this input: {type(exc).__name__}: {detail} (KILN_DEBUG=1 for a traceback)"
    if getattr(args, "json", False):
        print(json.dumps({"schema": 1, "ok": False, "error": line}, indent=2))
    print(line, file=sys.stderr)
    return 2
