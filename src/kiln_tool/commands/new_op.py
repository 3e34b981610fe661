"""`kiln new-op NAME`: start a new op from the skeleton docs/adding-an-op.md walks through."""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

HELP = "write the folder, Python wrapper and test skeletons of a new op (docs/adding-an-op.md)"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="the op's name: snake_case, a C++ and Python identifier, not taken")
    parser.add_argument("--schema", default=None, metavar="SCHEMA",
                        help='the op\'s schema, e.g. "NAME(Tensor input, Tensor rois, float scale, int size) -> '
                             '(Tensor, Tensor)": Tensor, float, int and bool arguments, one or more Tensor results '
                             '(default: "NAME(Tensor x) -> Tensor")')
    from ..new_op import KINDS

    # Not argparse's `choices`: a bad kind is new-op's one-line error (exit 2) like a bad name or schema.
    parser.add_argument("--kind", default="elementwise", metavar="{" + ",".join(KINDS) + "}",
                        help="the shape of op to start from (default: elementwise; each kind below)")
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    width = max(map(len, KINDS)) + 2
    parser.epilog = "kinds:\n" + "\n".join(
        textwrap.fill(what, 100, initial_indent=f"  {kind:<{width}}", subsequent_indent=" " * (width + 2))
        for kind, what in KINDS.items())
    parser.add_argument("--backward", action="store_true",
                        help="also an internal backward op _NAME_backward, its fake impl, the autograd formula and a "
                             "double-backward guard (elementwise: the gradient of the first tensor argument; rowwise: "
                             "of x and weight; roi and ps-roi always have one)")
    parser.add_argument("--root", type=Path, default=None, help="the checkout to write into (default: this one)")


def execute(args: argparse.Namespace) -> int:
    from ..new_op import NewOpError, plan, write
    from ..project import project_dir

    root: Path = args.root if args.root is not None else project_dir()
    try:
        written = write(plan(args.name, root, args.schema, args.backward, args.kind))
    except NewOpError as exc:
        print(f"kiln new-op: {exc}; nothing written", file=sys.stderr)
        return 2
    for path in written:
        print(path.relative_to(root.resolve()))
    print(f"next: docs/adding-an-op.md, from step 2 (write the kernel of {args.name})")
    return 0
