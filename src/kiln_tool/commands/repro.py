"""`kiln repro`: build twice under varied conditions; exit 1 unless the wheels are byte-identical (to each other and
to dist/'s wheel of the same name, when `kiln wheels` left one). `--once`: one build, against dist/'s wheel. Each
step is reported on stderr as it starts."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HELP = ("build a combination of the project twice (other path, umask, locale, TZ, listing order) and compare the "
        "wheels")


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--variant", default="cpu", help="local combination by CUDA tag: cpu (default) or cu130")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--keep", type=Path, default=None, help="on a difference, copy both wheels here")
    parser.add_argument("--once", action="store_true",
                        help="one build under the other conditions, compared with the wheel `kiln wheels` left in "
                             "dist/ (which must be there: exit 2 otherwise); half the time of two builds")


def execute(args: argparse.Namespace) -> int:
    from ..build_env import BuildEnvError
    from ..matrix_data import MatrixError, local_builds
    from ..pipeline import PipelineError
    from ..project import current_project
    from ..repro import NoReference, run_repro

    project = current_project()
    try:
        specs = [s for s in local_builds(project.matrix_file) if s.cuda == args.variant]
    except MatrixError as exc:
        print(f"kiln repro: {exc}", file=sys.stderr)
        return 2
    if not specs:
        print(f"kiln repro: no local combination with CUDA tag {args.variant!r}", file=sys.stderr)
        return 2
    started = time.monotonic()

    def progress(step: str) -> None:
        print(f"kiln repro [{time.monotonic() - started:5.0f} s]: {step}", file=sys.stderr, flush=True)

    try:
        result = run_repro(specs[0], project.root / "build" / "logs", args.keep, project, progress, once=args.once)
    except NoReference as exc:
        print(f"kiln repro --once: {exc}", file=sys.stderr)
        return 2
    except (PipelineError, BuildEnvError) as exc:
        print(f"kiln repro: {exc}", file=sys.stderr)
        return 2
    doc = {
        "combination": result.spec.name,
        "identical": result.identical,
        "builds": [{"condition": b.condition, "wheel": b.repaired.name, "built_sha256": b.built_sha256,
                    "repaired_sha256": b.repaired_sha256} for b in result.builds],
        "dist_wheel": None if result.dist_wheel is None else {
            "path": str(result.dist_wheel), "sha256": result.dist_sha256,
            "identical": result.dist_sha256 == result.builds[0].repaired_sha256},
        "once": args.once,
        "dist_note": result.dist_note,
        "differences": result.differences,
    }
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        for b in result.builds:
            print(f"{b.condition}: {b.repaired.name}  sha256 {b.repaired_sha256}")
        if result.dist_note:
            print(result.dist_note)
        elif result.dist_wheel is None:
            print(f"dist/ holds no {result.builds[0].repaired.name}: only the two builds were compared "
                  "(after kiln wheels, they are compared with its wheel too)")
        if result.identical:
            also = f" and identical to {result.dist_wheel}" if result.dist_wheel is not None else ""
            if args.once:
                print(f"reproducible: the rebuild of {result.spec.name} elsewhere is byte-identical to "
                      f"{result.dist_wheel}")
            else:
                print(f"reproducible: both builds of {result.spec.name} are byte-identical{also}")
        else:
            print(f"NOT reproducible: {result.spec.name}")
            print("\n".join(result.differences))
            if result.diffoscope:
                print("\ndiffoscope:\n" + result.diffoscope)
            else:
                print("\n(install diffoscope for a full report: apt-get install diffoscope-minimal)")
    return 0 if result.identical else 1
