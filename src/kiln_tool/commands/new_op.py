"""`kiln new-op NAME`: start a new op from the skeleton docs/adding-an-op.md walks through."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "write the folder, Python wrapper and test skeletons of a new op (docs/adding-an-op.md)"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="the op's name: snake_case, a C++ and Python identifier, not taken")
    parser.add_argument("--schema", default=None, metavar="SCHEMA",
                        help='the op\'s schema, e.g. "NAME(Tensor input, Tensor rois, float scale, int size) -> '
                             '(Tensor, Tensor)": Tensor, float, int and bool arguments, one or more Tensor results '
                             '(default: "NAME(Tensor x) -> Tensor")')
    parser.add_argument("--kind", default="elementwise", choices=["elementwise", "ps-roi"],
                        help="elementwise (default): any --schema, a kernel over the first tensor's elements; "
                             "ps-roi: a position-sensitive RoI op on ops/common/ps_roi.h (the family's schema, "
                             "torchvision's signature; --schema only to add 'int sampling_ratio'; the backward always)")
    parser.add_argument("--backward", action="store_true",
                        help="also an internal backward op _NAME_backward (gradient of the first tensor argument), its "
                             "fake impl, the autograd formula and a double-backward guard")
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
