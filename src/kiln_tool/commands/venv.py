"""`kiln venv`: the repo venv from requirement files, or the build venvs of local combinations, made with uv.

Standard library only, so a bare Python runs it: it is how the Makefile creates `.venv`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HELP = "create or update a venv with uv: .venv from requirement files (-r), or build venvs (--build)"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", nargs="?", type=Path, default=None,
                        help="the venv to create or update (default: .venv beside scripts/)")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("-r", "--requirement", dest="requirements", action="append", type=Path, metavar="FILE",
                      help="install this requirement file (may be repeated); files the venv already holds "
                           "unchanged are skipped")
    what.add_argument("--build", metavar="cpu|cu130|local",
                      help="the build venvs (.venvs/) of one local combination by CUDA tag, or of every one")
    parser.add_argument("--python", type=Path, default=None,
                        help="the interpreter a new venv is made from (default: the one running kiln, or its base)")


def _build(which: str) -> int:
    from ..build_env import BuildEnvError, ensure_build_env, venv_path
    from ..matrix_data import local_builds

    local = local_builds()
    specs = local if which == "local" else [s for s in local if s.cuda == which]
    if not specs:
        print(f"kiln venv: no local combination {which!r}; known: local, {', '.join(s.cuda for s in local)}",
              file=sys.stderr)
        return 2
    for spec in specs:
        log = venv_path(spec).parent / f"{spec.name}.venv.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("")
        started = time.perf_counter()
        try:
            ensure_build_env(spec, log)
        except BuildEnvError as exc:
            print(f"kiln venv: {spec.name}: {exc} ({log})", file=sys.stderr)
            return 1
        print(f"kiln venv: {venv_path(spec)} ready ({time.perf_counter() - started:.1f} s)", file=sys.stderr)
    return 0


def execute(args: argparse.Namespace) -> int:
    from ..venvs import VenvError, ensure_venv

    if args.build is not None:
        if args.path is not None:
            print("kiln venv: --build makes the venvs under .venvs/; it takes no PATH", file=sys.stderr)
            return 2
        return _build(args.build)
    missing = [str(f) for f in args.requirements if not f.is_file()]
    if missing:
        print(f"kiln venv: no such requirement file: {', '.join(missing)}", file=sys.stderr)
        return 2
    python = args.python or Path(getattr(sys, "_base_executable", sys.executable))
    if not python.exists():
        print(f"kiln venv: no interpreter at {python}", file=sys.stderr)
        return 2
    venv = args.path or Path(".venv")
    started = time.perf_counter()
    try:
        ensure_venv(venv, python, requirements=args.requirements)
    except VenvError as exc:
        print(f"kiln venv: {exc}", file=sys.stderr)
        return 1
    names = " ".join(str(f) for f in args.requirements)
    print(f"kiln venv: {venv} holds {names} ({time.perf_counter() - started:.1f} s)", file=sys.stderr)
    return 0
