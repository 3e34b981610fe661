"""kiln torch-runtime: the runtime wheels of the installed torch that the extension links (data/torch_runtime.json).

    kiln torch-runtime              print them, one requirement a line (torch's own pins)
    kiln torch-runtime --install    pip install them into this interpreter (a build's torch came with --no-deps)
"""

from __future__ import annotations

import argparse
import subprocess
import sys

HELP = "print or install the runtime wheels of the installed torch that the extension links (e.g. cudart)"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--install", action="store_true",
                        help="pip install them into this interpreter (only their own dependencies come along)")


def execute(args: argparse.Namespace) -> int:
    from kiln_tool.torch_runtime import TorchRuntimeError, installed_link_requirements

    try:
        version, requirements = installed_link_requirements()
    except TorchRuntimeError as exc:
        print(f"kiln torch-runtime: {exc}", file=sys.stderr)
        return 2
    for req in requirements:
        print(req.requirement)
        print(f"kiln torch-runtime: {req.library}: {req.requirement} (torch {version}: Requires-Dist "
              f"{req.source})", file=sys.stderr)
    if not requirements:
        print(f"kiln torch-runtime: torch {version}: CPU kernels (a CPU torch or KILN_VARIANT=cpu) link none "
              "of its runtime wheels", file=sys.stderr)
    if args.install and requirements:
        proc = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet",
                               *(r.requirement for r in requirements)])
        if proc.returncode != 0:
            print(f"kiln torch-runtime: pip install failed (exit {proc.returncode})", file=sys.stderr)
            return 1
    return 0
