"""`kiln matrix`: the build matrix of data/matrix.json as a table, a GitHub Actions matrix, or counts."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HELP = "print the build matrix (table, GitHub Actions JSON, the local subset, build counts, docker build args)"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--github", action="store_true",
                      help='GitHub Actions matrix: {"include": [...]} on one line (for $GITHUB_OUTPUT)')
    what.add_argument("--json", action="store_true", help="the selected jobs as an indented JSON list")
    what.add_argument("--local", action="store_true", help="only the combinations this machine can build")
    what.add_argument("--counts", action="store_true", help="jobs and wheels of both modes over the full matrix")
    what.add_argument("--docker-args", nargs=2, metavar=("VARIANT", "PLATFORM"),
                      help="docker build arguments of docker/Dockerfile, one per line")
    what.add_argument("--package", action="store_true",
                      help="the project's import package ([tool.kiln] package), for a CI step that imports the wheel")
    what.add_argument("--docker-context", action="store_true",
                      help="the folder of kiln's Dockerfile (the build context of `docker build`)")
    parser.add_argument("--mode", choices=("torch", "stable"), default="torch",
                        help="torch: a wheel per torch minor and Python (default); stable: one cp310-abi3 wheel "
                             "per CUDA variant and platform")
    parser.add_argument("--platform", action="append", dest="platforms", metavar="PLATFORM",
                        help="only this platform (x86_64, aarch64); may be repeated")
    parser.add_argument("--job", metavar="GLOB", help="only jobs whose name matches GLOB (e.g. 'torch2.14-cu130-*')")
    parser.add_argument("--python", metavar="X.Y", help="only this Python (jobs without it are left out)")
    parser.add_argument("--file", type=Path, default=None, help="read this matrix file instead of data/matrix.json")


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=True)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
             for line in [header, ["-" * w for w in widths], *rows]]
    return "\n".join(lines)


def execute(args: argparse.Namespace) -> int:
    from ..matrix_data import (
        MATRIX_FILE,
        MatrixError,
        arch_list,
        build_counts,
        build_jobs,
        cuda_version,
        docker_build_args,
        github_entry,
        github_matrix,
        load,
        select_jobs,
    )
    from ..project import ProjectError, find_project

    try:
        project = find_project()
    except ProjectError:
        project = None  # the matrix is readable whatever the rest of the table says; kiln wheels names the problem
    try:
        matrix = load(args.file or (project.matrix_file if project is not None else MATRIX_FILE))
        if args.docker_args:
            print("\n".join(docker_build_args(matrix, *args.docker_args)))
            return 0
        if args.package:
            if project is None:
                print("kiln matrix: --package: no [tool.kiln] table here (kiln -C DIR for another folder)",
                      file=sys.stderr)
                return 2
            print(project.package)
            return 0
        if args.docker_context:
            from ..resources import docker_dir

            print(docker_dir())
            return 0
        if args.counts:
            counts = build_counts(matrix)
            plats = list(matrix.platform_names)
            header = ["mode", "jobs", "wheels", *(f"wheels {p}" for p in plats)]
            rows = [[mode, str(c["jobs"]), str(c["wheels"]), *(str(c[f"wheels_{p}"]) for p in plats)]
                    for mode, c in counts.items()]
            print(_table(header, rows))
            return 0
        if args.local:
            local_rows = []
            for spec in matrix.local:
                cuda = cuda_version(spec.cuda)
                archs = ";".join(arch_list(matrix, cuda, "x86_64")) if cuda else "-"
                local_rows.append([spec.name, spec.torch, spec.cuda, spec.python, archs])
            print(_table(["combination", "torch", "variant", "python", "cuda archs (x86_64)"], local_rows))
            return 0
        platforms = tuple(args.platforms) if args.platforms else None
        jobs = build_jobs(matrix, args.mode, platforms)
        if args.job or args.python:
            jobs = select_jobs(jobs, args.job, args.python)
    except MatrixError as exc:
        print(f"kiln matrix: {exc}", file=sys.stderr)
        return 2

    if args.github:
        print(json.dumps(github_matrix(matrix, jobs), separators=(",", ":")))
        return 0
    if args.json:
        print(json.dumps([github_entry(matrix, job) for job in jobs], indent=2))
        return 0
    header = ["job", "torch", "variant", "platform", "python", "cuda archs"]
    rows = [[job.name, job.torch, job.variant, job.platform, " ".join(job.pythons),
             ";".join(arch_list(matrix, job.cuda, job.platform)) if job.cuda else "-"] for job in jobs]
    if args.mode == "stable":
        header.append("works with torch")
        for row, job in zip(rows, jobs, strict=True):
            row.append(" ".join(job.test_torch))
    print(_table(header, rows))
    wheels = sum(len(job.pythons) for job in jobs)
    tag = f", {matrix.stable_abi.abi_tag}" if args.mode == "stable" else ""
    print(f"\n{len(jobs)} jobs, {wheels} wheels ({args.mode} mode{tag})")
    return 0
