"""`kiln wheels`: build, repair and audit wheels into dist/ for this machine's combinations."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..matrix_data import BuildSpec

HELP = ("build (+ label, for a backend build) + auditwheel repair + kiln audit each combination of the project; "
        "passing wheels land in its dist/")


def configure_parser(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--variant", help="one local combination by CUDA tag: cpu (default) or cu130")
    which.add_argument("--matrix", choices=("local",), help="every combination this machine can build")
    parser.add_argument("--dist", type=Path, default=None, help="output folder (default: dist/)")
    parser.add_argument("--install-into", type=Path, default=None, metavar="VENV",
                        help="also pip install (no deps) each wheel whose torch matches this venv's (e.g. .venv)")


def _select(args: argparse.Namespace, matrix_file: Path) -> list[BuildSpec]:
    from ..matrix_data import local_builds

    local = local_builds(matrix_file)
    if args.matrix == "local":
        return list(local)
    tag = args.variant or "cpu"
    chosen = [spec for spec in local if spec.cuda == tag]
    if not chosen:
        raise ValueError(f"no local combination with CUDA tag {tag!r}; known: {', '.join(s.cuda for s in local)}")
    return chosen[:1]


def execute(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from ..pipeline import run_pipeline
    from ..project import current_project

    project = current_project()
    console = Console(stderr=True)
    try:
        specs = _select(args, project.matrix_file)
    except ValueError as exc:
        console.print(f"[red]kiln wheels:[/] {exc}")
        return 2
    dist = args.dist or project.root / "dist"
    logs = project.root / "build" / "logs"
    results = []
    with console.status("starting") as status:
        def progress(spec: BuildSpec, step: str) -> None:
            status.update(f"[bold]{spec.name}[/]: {step}")
            console.log(f"{spec.name}: {step}")

        for spec in specs:
            results.append(run_pipeline(spec, dist, logs, progress, args.install_into, project))

    table = Table(title=f"kiln wheels: {project.name} ({project.build} build)")
    for column in ("combination", "wheel", "size", "build time", "audit"):
        table.add_column(column, overflow="fold")
    for r in results:
        table.add_row(r.spec.name, r.wheel.name if r.wheel else "-", f"{r.size / 1024:.0f} KiB" if r.wheel else "-",
                      f"{r.build_seconds:.1f} s", r.verdict)
    console.print(table)
    failed = [r for r in results if not r.ok]
    if args.install_into is not None and not failed and not any("install" in r.steps for r in results):
        from ..pipeline import venv_torch_version

        found = venv_torch_version(args.install_into)
        console.print(f"[red]kiln wheels: nothing installed into {args.install_into}: it holds "
                      f"{'torch ' + found if found else 'no torch'}, and no wheel built here is for that torch "
                      "(`make dev-venv` gives .venv torch 2.13.0, the CPU wheel's)[/]")
        return 2
    for r in failed:
        kept = f"\nkept for inspection (not in dist/): {r.rejected}" if r.rejected else ""
        console.print(f"[red]{r.spec.name}: {r.verdict}[/]\n{r.detail}\nlog: {r.log}{kept}")
    return 1 if failed else 0
