"""kiln audit: the post-build ELF audit of wheels and shared libraries."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HELP = "audit wheels and .so files (ELF hardening, symbols, policy, CUDA archs, RECORD); exit 1 on errors"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="wheel (.whl) or shared library (.so)")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of tables")
    parser.add_argument("--torch-lib", type=Path, default=None, metavar="DIR",
                        help="the target torch's lib directory (default: the torch the wheel's build info or "
                        "torch requirement names, found in this interpreter or the repo's venvs)")
    parser.add_argument("--torch", default=None, metavar="VERSION", dest="torch_version",
                        help="audit against this torch (e.g. 2.14.1+cu130): installed here, or recorded in "
                        "data/torch_abi; for wheels that name no torch")
    parser.add_argument("--cuda-archs", default=None, metavar="LIST",
                        help='requested CUDA archs, TORCH_CUDA_ARCH_LIST syntax, e.g. "8.0;9.0a;12.0+PTX" '
                        "(default: the build info's)")
    parser.add_argument("--policy", default="manylinux_2_28", metavar="NAME",
                        help="data/audit_policy/NAME.json: symbol-version ceilings for artifacts without a "
                        "manylinux tag (default: %(default)s); never the wheel-tag floor, which comes from the "
                        "target torch's own wheel (unknown without one)")
    parser.add_argument("--gpu", default=None, metavar="sm_XY",
                        help="say whether a GPU of this compute capability can run each library's device code "
                        "(SASS for it, or PTX at or below it for the driver to JIT)")
    parser.add_argument("--release", action="store_true",
                        help="hold wheels to the release rules: every platform tag at the release floor "
                        "(data/matrix.json manylinux_floor), never above it. In a stand-in base's run "
                        "(KILN_STANDIN_MANYLINUX=TAG, set by kiln cibuildwheel) the wheel must carry exactly "
                        "that base's tag instead, and is said not to be a release wheel")
    parser.add_argument("--fetch-dependencies", action="store_true",
                        help="a needed library that neither the wheel, torch nor the platform has, in a wheel whose "
                        "declared dependencies are not installed here, is 'dependency-unknown'; with this flag their "
                        "wheels are downloaded (pip download --no-deps; needs the network) and their file lists "
                        "read: shipped and reached by a RUNPATH, shipped but not reached, or missing")
    parser.add_argument("--verbose", action="store_true", help="list every passed check instead of one line per "
                        "library")


def execute(args: argparse.Namespace) -> int:
    from kiln_tool.audit import AuditInputError, AuditOptions, audit_paths

    release = None
    if args.release:
        from kiln_tool.audit.release_rule import release_rule

        try:
            release = release_rule()
        except ValueError as exc:
            print(f"kiln audit: {exc}", file=sys.stderr)
            return 2
    options = AuditOptions(torch_lib=args.torch_lib, cuda_archs=args.cuda_archs, policy=args.policy, gpu=args.gpu,
                           torch_version=args.torch_version, release=release,
                           fetch_dependencies=args.fetch_dependencies)
    try:
        report = audit_paths(list(args.paths), options)
    except AuditInputError as exc:
        if args.json:
            print(json.dumps({"schema": 1, "ok": False, "error": str(exc)}, indent=2))
        print(f"kiln audit: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        sys.stdout.write(report.render_text(verbose=args.verbose))
    return 0 if report.ok else 1
