"""kiln cibuildwheel: the project's wheels of the local combinations, made by cibuildwheel in containers
(docs/containers.md); and the project's [tool.cibuildwheel] table, generated or checked.

    kiln cibuildwheel                         the local combinations of the project's matrix (kiln's: cp311 x
                                              {CPU torch 2.13.0, cu130 torch 2.14.1}): build, repair, audit
                                              (--release) and the test-command, each in its container
    kiln -C DIR cibuildwheel --variant cpu    one of them, of the project in DIR
    kiln cibuildwheel --base standin          never try to pull the real manylinux_2_28 image
    kiln cibuildwheel --print-config          the [tool.cibuildwheel] table kiln builds this project with (TOML)
    kiln cibuildwheel --check-config          one line per way the project's table fails kiln; exit 2 if any
    kiln cibuildwheel --write-config FILE     cibuildwheel's config option for the project: the generated table
                                              in FILE when it has none (a CI job: python -m cibuildwheel $(...))
    kiln cibuildwheel --install-build-requirements
                                              (before-build, in the build's Python) kiln's toolchain or the
                                              backend's build requirements, for a build without isolation

It starts what it needs (docker.io, dockerd without a bridge network), builds the base (the real
image where it can be pulled, else the STAND-IN) and kiln's Dockerfile on it, then runs cibuildwheel
on an export of the project with its pyproject.toml's [tool.cibuildwheel]. Wheels land in OUT (wheels
only), logs and summary.json in --logs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

HELP = "build the local combinations' wheels with cibuildwheel in manylinux (or stand-in) containers"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--variant", action="append", dest="variants", metavar="VARIANT",
                        help="cpu or cu130 (a local combination of data/matrix.json); repeatable; default: all")
    parser.add_argument("--python", action="append", dest="pythons", metavar="X.Y",
                        help="CPython of the wheels (default: each local combination's own); repeatable: "
                        "more wheels in one container run")
    parser.add_argument("--arch", choices=("x86_64", "aarch64"), default=None,
                        help="the wheels' processor (default: this machine's); another one is built and tested "
                        "under qemu-user emulation (docs/containers.md)")
    parser.add_argument("--base", choices=("auto", "real", "standin"), default="auto",
                        help="auto: the real manylinux_2_28 image where it can be pulled, else the stand-in")
    parser.add_argument("--out", type=Path, default=Path("wheelhouse"), metavar="DIR",
                        help="where the wheels go (default: %(default)s)")
    parser.add_argument("--logs", type=Path, default=Path("build/cibuildwheel"), metavar="DIR",
                        help="cibuildwheel's logs and summary.json (default: %(default)s; OUT holds wheels only, "
                        "as kiln release and kiln index want it)")
    parser.add_argument("--skip-tests", action="store_true", help="build, repair and audit only")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--repro", action="store_true",
                      help="instead: build each wheel twice in the same image (ccache off, no tests) and compare "
                      "them byte for byte; diffoscope on a difference; exit 1 unless identical")
    mode.add_argument("--compile-cost", action="store_true",
                      help="instead: one container run making a wheel per --python (default 3.11 and 3.12) of "
                      "each variant from a cold cache, every compile metered: CPU seconds, ccache hits, kernel "
                      "cores recompiled (a benchmark: prints and writes compile-cost.json)")
    mode.add_argument("--print-config", action="store_true",
                      help="instead: print the [tool.cibuildwheel] table kiln builds this project with (TOML: no "
                      "build isolation, the job's exact torch, kiln at this version, kiln's repair and release "
                      "audit, the KILN_* values passed)")
    mode.add_argument("--check-config", action="store_true",
                      help="instead: check the project's [tool.cibuildwheel] table; one line per problem, exit 2 "
                      "if any, 0 when it holds")
    mode.add_argument("--write-config", type=Path, metavar="FILE",
                      help="instead (a CI job before cibuildwheel): when the project has no [tool.cibuildwheel], "
                      "write the generated one to FILE and print `--config-file FILE`; print nothing when its own "
                      "table holds; exit 2, one line per problem, when it fails kiln")
    mode.add_argument("--install-build-requirements", action="store_true",
                      help="instead (before-build, in the build's Python): install what a build without isolation "
                      "needs: kiln's hash-locked toolchain, or the backend's [build-system] requires")
    parser.add_argument("--against", type=Path, action="append", default=[], metavar="WHEEL",
                        help="with --repro: a wheel an earlier kiln cibuildwheel of the same commit made, standing "
                        "for the first build (only the second is built); repeatable")
    parser.add_argument("--kiln-wheel", type=Path, action="append", default=[], metavar="WHEEL",
                        help="a torch-kiln wheel the containers may install (before it is published); repeatable")
    parser.add_argument("--keep-engine", action="store_true",
                        help="leave a dockerd this run started running (default: end it)")


def wheel_facts(path: Path) -> dict[str, Any]:
    from packaging.utils import parse_wheel_filename

    _, version, _, tags = parse_wheel_filename(path.name)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return {"name": path.name, "version": str(version), "tags": sorted(str(t) for t in tags),
            "size": path.stat().st_size, "sha256": digest}


def _config(args: argparse.Namespace, project: Any) -> int:
    from kiln_tool import __version__
    from kiln_tool.containers import cibw_config
    from kiln_tool.matrix_data import MatrixError
    from kiln_tool.matrix_data import load as load_matrix

    try:
        if args.print_config:
            table = cibw_config.generate(project, load_matrix(project.matrix_file), __version__)
            sys.stdout.write(cibw_config.render(table, project, __version__))
            return 0
        problems = cibw_config.check(cibw_config.load_table(project.root), project, __version__)
    except (cibw_config.ConfigError, MatrixError) as exc:
        print(f"kiln cibuildwheel: {exc}", file=sys.stderr)
        return 2
    for problem in problems:
        print(f"kiln cibuildwheel: {problem}", file=sys.stderr)
    if problems:
        return 2
    print(f"kiln cibuildwheel: {project.root / 'pyproject.toml'}'s [tool.cibuildwheel] holds for kiln {__version__}")
    return 0


def _write_config(target: Path, project: Any) -> int:
    from kiln_tool.containers.cibw import ConfigRefused, cibuildwheel_config_args
    from kiln_tool.matrix_data import MatrixError
    from kiln_tool.matrix_data import load as load_matrix

    target = target.resolve()
    if target.is_dir() or not target.parent.is_dir():
        print(f"kiln cibuildwheel: --write-config {target}: not a file in an existing folder", file=sys.stderr)
        return 2
    try:
        args = cibuildwheel_config_args(project, load_matrix(project.matrix_file), target.parent)
    except (ConfigRefused, MatrixError) as exc:
        print(f"kiln cibuildwheel: {exc}", file=sys.stderr)
        return 2
    if args:
        written = Path(args[1])
        written.replace(target)
        print(f"--config-file {target}")
    return 0


def _install_build_requirements(project: Any) -> int:
    import subprocess

    from kiln_tool.build_env import BuildEnvError
    from kiln_tool.containers.cibw_config import install_build_requirements

    try:
        installed = install_build_requirements(project, Path(sys.executable))
    except BuildEnvError as exc:
        print(f"kiln cibuildwheel: {exc}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as exc:
        print(f"kiln cibuildwheel: installing the build requirements failed (exit {exc.returncode})", file=sys.stderr)
        return 1
    print(f"kiln cibuildwheel: build requirements of {project.name}: {' '.join(installed) or 'none beyond torch'}")
    return 0


def execute(args: argparse.Namespace) -> int:
    from kiln_tool.containers.cibw import host_arch, job_for, matrix_name
    from kiln_tool.containers.engine import STATE_DIR, ContainerError, running_engine
    from kiln_tool.containers.images import ensure_base
    from kiln_tool.matrix_data import MatrixError
    from kiln_tool.matrix_data import load as load_matrix
    from kiln_tool.project import ProjectError, current_project

    try:
        project = current_project()
    except ProjectError as exc:
        for problem in exc.problems:
            print(f"kiln cibuildwheel: {problem}", file=sys.stderr)
        return 2
    if args.print_config or args.check_config:
        return _config(args, project)
    if args.install_build_requirements:
        return _install_build_requirements(project)
    if args.write_config:
        return _write_config(args.write_config, project)
    started = time.monotonic()
    try:
        missing = [str(w) for w in args.kiln_wheel if not w.is_file() or not w.name.startswith("torch_kiln-")]
        if missing:
            raise ContainerError(f"--kiln-wheel {missing[0]}: not a torch-kiln wheel file")
        if args.against and not args.repro:
            raise ContainerError("--against goes with --repro")
        strange = [str(w) for w in args.against if not w.is_file() or not w.name.endswith(".whl")
                   or not w.name.startswith(f"{project.wheel_name}-")]
        if strange:
            raise ContainerError(f"--against {strange[0]}: not a wheel file of {project.name}")
        matrix = load_matrix(project.matrix_file)
        variants = args.variants or [s.cuda for s in matrix.local]
        arch = args.arch or host_arch()
        plans = []
        for variant in variants:
            spec = next((s for s in matrix.local if s.cuda == variant), None)
            if spec is None:
                raise ContainerError(f"--variant {variant}: not a local combination of {matrix_name(project)} "
                                     f"({', '.join(s.cuda for s in matrix.local)})")
            default = [spec.python, "3.12"] if args.compile_cost else [spec.python]
            pythons = tuple(args.pythons or default)
            plans.append((job_for(variant, pythons, arch, project), pythons))
    except (ContainerError, MatrixError) as exc:
        print(f"kiln cibuildwheel: {exc}", file=sys.stderr)
        return 2
    summary: dict[str, Any] = {"schema": 1, "project": project.name, "runs": []}
    try:
        with running_engine(args.keep_engine) as engine:
            base = ensure_base(engine, args.base, arch, matrix)
            summary["base"] = {"image": base.image, "standin": base.standin is not None,
                               "describe": base.describe()}
            if base.standin is not None:
                summary["base"].update(glibc=base.standin.glibc, manylinux_tag=base.standin.manylinux_tag)
            STATE_DIR.mkdir(parents=True, exist_ok=True)
            args.out.mkdir(parents=True, exist_ok=True)
            args.logs.mkdir(parents=True, exist_ok=True)
            links = kiln_wheel_links(args.kiln_wheel, STATE_DIR)
            if args.repro or args.compile_cost:
                return _measure(engine, base, plans, args, project, links)
            for job, pythons in plans:
                summary["runs"].append(_build(engine, base, job, pythons, args, project, links))
    except ContainerError as exc:
        print(f"kiln cibuildwheel: {exc}", file=sys.stderr)
        return exc.exit_code
    summary["seconds"] = round(time.monotonic() - started, 1)
    (args.logs / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    note = f" {summary['base']['describe']}." if summary["base"]["standin"] else ""
    print(f"kiln cibuildwheel: {sum(len(r['wheels']) for r in summary['runs'])} wheel(s) in {args.out} "
          f"in {summary['seconds']:.0f} s (logs and summary.json in {args.logs}).{note}")
    return 0


def kiln_wheel_links(wheels: list[Path], state: Path) -> tuple[Path, ...]:
    """A folder holding only the --kiln-wheel files (pip's find-links reads a whole folder)."""
    import shutil

    if not wheels:
        return ()
    folder = state / "kiln-wheels"
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for wheel in wheels:
        shutil.copy2(wheel, folder / wheel.name)
    return (folder,)


def _build(engine: Any, base: Any, job: Any, pythons: tuple[str, ...], args: argparse.Namespace, project: Any,
           links: tuple[Path, ...]) -> dict[str, Any]:
    from kiln_tool.containers.cibw import run_cibuildwheel

    log = args.logs / f"cibuildwheel-{job.name}.log"
    log.write_text("")
    print(f"kiln cibuildwheel: {project.name} {job.name} ({', '.join(pythons)}) on {base.describe()}; log {log}",
          flush=True)
    run = run_cibuildwheel(engine, base, job, args.out, project=project, log=log, skip_tests=args.skip_tests,
                           pythons=pythons, find_links=links)
    facts = [wheel_facts(w) for w in run.wheels]
    for fact in facts:
        print(f"kiln cibuildwheel: {fact['name']} ({fact['size']} bytes, sha256 {fact['sha256']})")
    for identifier, phase, seconds in run.phases:
        print(f"kiln cibuildwheel:   {identifier} {phase}: {seconds:.0f} s")
    return {"job": job.name, "identifiers": list(run.identifiers), "image": run.image,
            "seconds": round(run.seconds, 1), "wheels": facts,
            "phases": [{"identifier": i, "phase": p, "seconds": round(s, 1)} for i, p, s in run.phases]}


def _made_by(wheel: Path, job: Any) -> bool:
    """Whether `wheel` is one of `job`'s: a build identifier of the job (cp311-manylinux_x86_64) among its tags,
    and the job's variant ending its version label (pt213cpu, cu130)."""
    import re

    from packaging.utils import parse_wheel_filename

    _, version, _, tags = parse_wheel_filename(wheel.name)
    identifiers = {f"{t.interpreter}-manylinux_{re.sub(r'^manylinux_[0-9]+_[0-9]+_', '', t.platform)}" for t in tags}
    return bool(identifiers & set(job.identifiers)) and str(version.local or "").endswith(job.variant)


def _measure(engine: Any, base: Any, plans: list[Any], args: argparse.Namespace, project: Any,
             links: tuple[Path, ...]) -> int:
    from kiln_tool.containers import measure

    results = []
    ok = True
    for job, pythons in plans:
        log = args.logs / f"{'repro' if args.repro else 'compile-cost'}-{job.name}.log"
        log.write_text("")
        print(f"kiln cibuildwheel: {'reproducibility' if args.repro else 'compile cost'} of {job.name} "
              f"({', '.join(pythons)}) on {base.describe()}; log {log}", flush=True)
        if args.repro:
            mine = tuple(w.resolve() for w in args.against if _made_by(w, job))
            result = measure.repro(engine, base, job, pythons, args.out, log, project, links, mine)
            for wheel in result["wheels"]:
                verdict = "identical" if wheel["identical"] else f"DIFFERENT ({wheel.get('diffoscope')})"
                print(f"kiln cibuildwheel: repro {wheel['name']}: two builds {verdict}")
            ok = ok and bool(result["identical"])
        else:
            result = measure.compile_cost(engine, base, job, pythons, args.out, log, project, links)
            for wheel in result["wheels"]:
                print(f"kiln cibuildwheel: compile cost {wheel['build']}: {wheel['compile_cpu_seconds']} CPU-s over "
                      f"{wheel['objects']} objects, ccache {wheel['ccache_hits']} hit(s) / {wheel['ccache_misses']} "
                      f"miss(es), kernel cores recompiled {wheel['kernel_core_misses']} of "
                      f"{wheel['kernel_core_objects']}")
            if "second_over_first" in result:
                print(f"kiln cibuildwheel: the second wheel's compile costs {result['second_over_first']:.1%} of the "
                      f"first's (target <= 25% and no kernel core recompiled: "
                      f"{'met' if result['target_met'] else 'MISSED'})")
        result["base"] = base.describe()
        results.append(result)
    name = "repro.json" if args.repro else "compile-cost.json"
    (args.logs / name).write_text(json.dumps(results, indent=2) + "\n")
    return 0 if ok else 1
