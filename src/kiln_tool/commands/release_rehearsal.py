"""kiln release-rehearsal: release.yml's release path on the cibuildwheel wheels, then installs as a user would.

    kiln release-rehearsal [--wheels wheelhouse] [--work build/rehearsal]

Needs the wheels of `kiln cibuildwheel` (make cibuildwheel). Serves the published site on
127.0.0.1, runs `kiln release` onto it, installs each wheel's combination with pip and with uv in a
fresh container without build tools, calls every op, then offers the release path the CPU wheel as a rebuild on
another day would make it (the same files, its zip entries dated a day later: what another SOURCE_DATE_EPOCH changes
in a reproducible build, which `make container-repro` rebuilds in a container) and checks that the release path
refuses it and leaves the site as it was.
Serves the project of [tool.kiln] (`kiln -C DIR release-rehearsal` for another folder's).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

HELP = "rehearse a release: kiln release onto a site served on 127.0.0.1, then pip/uv installs in fresh containers"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--wheels", type=Path, default=Path("wheelhouse"), metavar="DIR",
                        help="the wheels of kiln cibuildwheel (default: %(default)s)")
    parser.add_argument("--work", type=Path, default=Path("build/rehearsal"), metavar="DIR",
                        help="the rehearsal's sites, rebuilt wheel, logs and summary.json (default: %(default)s)")
    parser.add_argument("--base", choices=("auto", "real", "standin"), default="auto",
                        help="the images to install in (as for kiln cibuildwheel)")
    parser.add_argument("--keep-engine", action="store_true", help="leave a dockerd this run started running")


def redate_wheel(wheel: Path, dest: Path, epoch: int) -> Path:
    """``wheel`` rewritten to ``dest`` with every zip entry dated ``epoch`` (UTC, zip's 1980 floor): the same
    members in the same order with the same bytes, modes and compression, so its RECORD still holds."""
    import zipfile
    from datetime import datetime, timezone

    stamp = max(datetime.fromtimestamp(epoch, tz=timezone.utc), datetime(1980, 1, 1, tzinfo=timezone.utc))
    date_time = (stamp.year, stamp.month, stamp.day, stamp.hour, stamp.minute, stamp.second)
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(dest.name + ".part")
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(partial, "w") as out:
        for info in src.infolist():
            entry = zipfile.ZipInfo(info.filename, date_time)
            entry.external_attr, entry.compress_type, entry.create_system = (info.external_attr, info.compress_type,
                                                                             info.create_system)
            with src.open(info) as data, out.open(entry, "w") as target:
                shutil.copyfileobj(data, target, 1 << 20)
    partial.replace(dest)
    return dest


def _uv() -> Path | None:
    beside = Path(sys.executable).parent / "uv"
    if beside.is_file():
        return beside
    found = shutil.which("uv")
    return Path(found) if found else None


def execute(args: argparse.Namespace) -> int:
    from kiln_tool.containers.engine import ContainerError, running_engine

    wheels = sorted(args.wheels.glob("*.whl"))
    if not wheels:
        print(f"kiln release-rehearsal: no wheel in {args.wheels}: run `make cibuildwheel` first", file=sys.stderr)
        return 2
    from kiln_tool.op_smoke import SamplesError, project_samples
    from kiln_tool.project import ProjectError, current_project

    try:
        project_samples(current_project())  # read before anything is built: a bad samples file is exit 2 now
    except ProjectError as exc:
        for problem in exc.problems:
            print(f"kiln release-rehearsal: {problem}", file=sys.stderr)
        return 2
    except SamplesError as exc:
        print(f"kiln release-rehearsal: {exc}", file=sys.stderr)
        return 2
    uv = _uv()
    if uv is None:
        print("kiln release-rehearsal: no uv here (requirements/test.txt pins it: make dev-venv)", file=sys.stderr)
        return 2
    started = time.monotonic()
    try:
        with running_engine(args.keep_engine) as engine:
            summary = _rehearse(engine, args, wheels, uv)
    except ContainerError as exc:
        print(f"kiln release-rehearsal: {exc}", file=sys.stderr)
        return exc.exit_code
    summary["seconds"] = round(time.monotonic() - started, 1)
    (args.work.resolve() / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"kiln release-rehearsal: passed in {summary['seconds']:.0f} s ({summary['base']}); "
          f"{args.work / 'summary.json'}")
    return 0


def _rehearse(engine: Any, args: argparse.Namespace, wheels: list[Path], uv: Path) -> dict[str, Any]:
    from kiln_tool.audit.release_rule import STANDIN_ENV
    from kiln_tool.containers.cibw import host_arch
    from kiln_tool.containers.engine import ContainerError
    from kiln_tool.containers.images import ensure_base
    from kiln_tool.containers.rehearsal import rehearse
    from kiln_tool.epoch import source_date_epoch
    from kiln_tool.project import current_project

    base = ensure_base(engine, args.base, host_arch())
    if base.standin is not None:
        os.environ[STANDIN_ENV] = base.standin.manylinux_tag
        print(f"kiln release-rehearsal: {base.describe()}: the release audit asserts that tag")
    work = args.work.resolve()
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    log = work / "rehearsal.log"
    rebuilt = work / "rebuilt"
    cpu = next((w for w in wheels if "cpu-" in w.name), None)
    if cpu is None:
        raise ContainerError(f"no CPU wheel in {args.wheels} to rebuild")
    epoch = int(source_date_epoch()) + 86400
    print("kiln release-rehearsal: the CPU wheel as a rebuild a day later makes it (its zip entries dated "
          f"SOURCE_DATE_EPOCH {epoch}: other bytes, the same name)", flush=True)
    redated = redate_wheel(cpu, rebuilt / cpu.name, epoch)
    if redated.read_bytes() == cpu.read_bytes():
        raise ContainerError("the redated wheel has the same bytes; it would not test the refusal")
    staged = work / "release-wheels"
    staged.mkdir()
    for wheel in wheels:
        shutil.copy2(wheel, staged / wheel.name)
    summary = rehearse(engine, base, staged, rebuilt, work / "sites", uv, log, current_project())
    summary["rebuilt"] = {"wheel": cpu.name, "source_date_epoch": epoch}
    summary["base"] = base.describe()
    return summary
