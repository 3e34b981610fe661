"""`kiln label WHEEL -w DIR`: give a wheel the project's own backend built what a kiln build has.

The local version label (``+pt214cu130``), exactly one torch pin (``torch>=2.14,<2.15``) and the build info
(``<package>/_build_info.json``), from the torch installed beside the Python that runs kiln, with the
file name, METADATA and RECORD rewritten to agree (kiln_tool.relabel). `kiln wheels` does this itself
after a backend build; in a cibuildwheel job it is the first step of the repair command:
``kiln label {wheel} -w /tmp/labelled && kiln repair /tmp/labelled/*.whl -w {dest_dir} && kiln audit ...``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

HELP = "set a backend-built wheel's version label, torch pin and build info (from the torch beside this Python)"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("wheels", nargs="+", type=Path, metavar="WHEEL")
    parser.add_argument("-w", "--wheel-dir", type=Path, required=True, help="where the labelled wheels go")


def execute(args: argparse.Namespace) -> int:
    from ..epoch import source_date_epoch
    from ..pipeline import PipelineError, label_wheel
    from ..project import current_project
    from ..torch_probe import TorchNotFound, find_torch
    from ..variant import VariantError, resolve_variant

    project = current_project()
    if project.build != "backend":
        print(f'kiln label: {project.name} is built by kiln (tool.kiln.build = "kiln"): its metadata provider '
              "labels it", file=sys.stderr)
        return 2
    try:
        torch = find_torch()
        variant = resolve_variant(torch, project=project)
    except (TorchNotFound, VariantError) as exc:
        print(f"kiln label: {exc}", file=sys.stderr)
        return 2
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    for wheel in args.wheels:
        try:
            labelled = label_wheel(wheel, args.wheel_dir, project, torch, variant, python,
                                   os.environ.get("KILN_GIT_COMMIT"), source_date_epoch(project.root),
                                   Path(sys.executable), dict(os.environ))
        except PipelineError as exc:
            print(f"kiln label: {str(exc).removeprefix(f'{exc.step}: ')}", file=sys.stderr)
            return 2
        print(labelled)
    return 0
