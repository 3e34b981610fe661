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
    from ..new_op import LAYOUT_HELP

    # Strings, not argparse types: a bad value is new-op's one-line error (exit 2) like a bad name.
    parser.add_argument("--box-layout", default=None, metavar="LAYOUT",
                        help="roi: the columns of a roi row, a named layout (" +
                             "; ".join(f"{k}: {v}" for k, v in LAYOUT_HELP.items()) +
                             ') or the column names, comma-separated, the first the batch index: '
                             '"batch, cx, cy, w, h, angle" (default: torchvision)')
    parser.add_argument("--box-columns", default=None, metavar="N",
                        help="roi: the number of values in a roi row, the batch index included (alone: columns "
                             "batch, c1, c2, ...; 5 is torchvision's; with --box-layout, its count)")
    parser.add_argument("--param", action="append", default=[], metavar="NAME:TYPE=DEFAULT",
                        help="roi, repeatable: a parameter of the op's own after the family's, TYPE bool, int or "
                             "float, e.g. clockwise:bool=False (its header's struct Params, its schema, wrapper, "
                             "module and tests)")
    parser.add_argument("--root", type=Path, default=None, help="the checkout to write into (default: this one)")


def execute(args: argparse.Namespace) -> int:
    from ..new_op import NewOpError, plan, write
    from ..project import project_dir

    root: Path = args.root if args.root is not None else project_dir()
    try:
        written = write(plan(args.name, root, args.schema, args.backward, args.kind, args.box_layout,
                             args.box_columns, args.param))
    except NewOpError as exc:
        print(f"kiln new-op: {exc}; nothing written", file=sys.stderr)
        return 2
    for path in written:
        print(path.relative_to(root.resolve()))
    print(f"next: docs/adding-an-op.md, from step 2 (write the kernel of {args.name})")
    return 0
