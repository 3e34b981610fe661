"""Entry point of `scripts/kiln`: argparse subcommands, one module each.

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
}


def _load(name: str) -> ModuleType:
    return importlib.import_module(f"kiln_tool.commands.{COMMANDS[name]}")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kiln", description="opkiln maintainer tool")
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


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Import only the module of the command being run.
    only = argv[0] if argv and argv[0] in COMMANDS else None
    parser = build_parser(only)
    args = parser.parse_args(argv)
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
