"""cibuildwheel with the project's own [tool.cibuildwheel] configuration, in the build image of one variant.

The project is the one kiln serves (kiln_tool.project: the current directory, or `kiln -C DIR`); its
matrix says what a job builds. Only what a GitHub job sets per job is set here (wheels.yml): the build
identifiers, the image, the KILN_* values of the matrix entry, CCACHE_DIR and SOURCE_DATE_EPOCH. What differs from the
GitHub run is said on every run: the base (the stand-in where the real image cannot be pulled),
the torch index (this machine's package sources instead of download.pytorch.org, which is not
reachable here) and the containers' network (the host's; no bridge network exists here).

cibuildwheel copies its whole working directory into the container, so it runs on a clean export
of the project (tracked and not-ignored files only), never on a tree with venvs and builds.
"""

from __future__ import annotations

import json
import os
import platform as _platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from .. import resources
from ..build_info import git_dirty
from ..epoch import source_date_epoch
from ..matrix_data import Matrix, MatrixJob, build_jobs, github_entry
from ..matrix_data import load as load_matrix
from .engine import STATE_DIR, ContainerError, Engine, load_recipe, scratch_tmpfs_args
from .images import Base, ensure_build_image

if TYPE_CHECKING:
    from ..project import KilnProject

CCACHE_HOST_DIR = Path(os.environ.get("KILN_CONTAINER_CCACHE", STATE_DIR.parent / "ccache-containers"))
HOST_MOUNT = "/host"  # cibuildwheel mounts the host's / here
# Lines cibuildwheel prints when a step of a build starts (4.3.5, platforms/linux.py).
_PHASES = (
    ("before-build", re.compile(r"Running before_build")),
    ("build", re.compile(r"Building wheel\.\.\.")),
    ("repair", re.compile(r"Repairing wheel\.\.\.")),
    ("before-test", re.compile(r"Running before_test")),
    ("test", re.compile(r"Testing wheel\.\.\.")),
    ("done", re.compile(r"✓ .* finished in|Build finished|took \d")),
)
_IDENTIFIER = re.compile(r"Building (cp\d+-manylinux_\w+) wheel")


@dataclass
class CibwRun:
    job: str
    identifiers: tuple[str, ...]
    image: str
    base: Base
    wheels: list[Path] = field(default_factory=list)
    phases: list[tuple[str, str, float]] = field(default_factory=list)
    """(identifier, phase, seconds)"""
    seconds: float = 0.0
    log: Path | None = None


def export_tree(dest: Path, source: Path) -> Path:
    """Copy the tracked and not-ignored files of `source` (a git working tree, uncommitted edits included)."""
    proc = subprocess.run(["git", "-C", str(source), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                          capture_output=True, check=True)
    dest.mkdir(parents=True, exist_ok=True)
    for name in sorted(set(proc.stdout.decode().split("\0")) - {""}):
        src = source / name
        if not src.exists() and not src.is_symlink():
            continue  # deleted in the working tree
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            target.symlink_to(src.readlink())
        else:
            shutil.copy2(src, target)
    return dest


def host_pip_sources() -> dict[str, str]:
    """This machine's pip package sources (find-links, extra indexes), as a container sees them under /host."""
    proc = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    values: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        key, _, value = line.partition("=")
        name = key.rsplit(".", 1)[-1]
        if name in ("find-links", "extra-index-url") and value.strip().strip("'\""):
            values[name] = value.strip().strip("'\"")
    return container_pip_env(values)


def container_pip_env(values: dict[str, str]) -> dict[str, str]:
    """PIP_* variables for a container from pip settings of this machine: local paths and file:// URLs are
    moved under the /host mount (cibuildwheel mounts / there), remote URLs are kept."""
    env: dict[str, str] = {}
    for name, value in sorted(values.items()):
        mapped = []
        for item in value.split():
            if item.startswith("file://"):
                mapped.append("file://" + HOST_MOUNT + item[len("file://"):])
            elif item.startswith("/"):
                mapped.append(HOST_MOUNT + item)
            else:
                mapped.append(item)
        env["PIP_" + name.upper().replace("-", "_")] = " ".join(mapped)
    return env


def matrix_name(project: KilnProject) -> str:
    """How messages name the project's matrix: kiln's data/matrix.json, or its own file inside the project."""
    if project.matrix_file == resources.data_path("matrix.json"):
        return "data/matrix.json"
    try:
        return str(project.matrix_file.relative_to(project.root))
    except ValueError:
        return str(project.matrix_file)


def job_for(variant: str, pythons: tuple[str, ...], arch: str, project: KilnProject) -> MatrixJob:
    """The job of `project`'s matrix for its local combination `variant` (cpu, cu130) in the project's default ABI
    mode (a stable-ABI job builds with the matrix's stable build torch), narrowed to `pythons`."""
    matrix = load_matrix(project.matrix_file)
    where = matrix_name(project)
    local = [s for s in matrix.local if s.cuda == variant]
    if not local:
        raise ContainerError(f"no local combination of {where} builds {variant}")
    mode = project.default_abi_mode
    torch = local[0].torch
    jobs = [j for j in build_jobs(matrix, mode, (arch,))
            if j.variant == variant and (mode == "stable" or j.torch == torch)]
    missing = [p for p in pythons if not jobs or p not in jobs[0].pythons]
    if not jobs or missing:
        kind = "" if mode == "torch" else "stable-ABI "
        raise ContainerError(f"{where} has no {kind}job for torch {torch} {variant} {arch} with Python "
                             f"{', '.join(missing or pythons)}")
    return replace(jobs[0], pythons=tuple(p for p in jobs[0].pythons if p in pythons))


def run_cibuildwheel(engine: Engine, base: Base, job: MatrixJob, out: Path, *, project: KilnProject, log: Path,
                     skip_tests: bool = False, extra_env: dict[str, str] | None = None,
                     cibuildwheel: Path | None = None, pythons: tuple[str, ...] | None = None,
                     torch_index: str | None = None, export: Path | None = None,
                     find_links: tuple[Path, ...] = ()) -> CibwRun:
    """cibuildwheel for `job`'s identifiers (those of `pythons`) of `project` into `out`. `export`: an export of
    the project made by export_tree() to build from (default: a fresh one). `find_links`: folders of wheels the
    containers' pip may install from (e.g. a torch-kiln wheel that is not published yet)."""
    arch = job.platform
    matrix = load_matrix(project.matrix_file)
    entry = github_entry(matrix, job)
    image = ensure_build_image(engine, base, job.variant, arch, log=log, matrix=matrix)
    identifiers = tuple(i for i in job.identifiers
                        if pythons is None or i.split("-")[0] in {"cp" + p.replace(".", "") for p in pythons})
    CCACHE_HOST_DIR.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CIBW_", "KILN_", "PIP_"))}
    env.update({
        "CIBW_BUILD": " ".join(identifiers),
        "CIBW_ARCHS": arch,
        f"CIBW_MANYLINUX_{arch.upper()}_IMAGE": image,
        # No bridge network here; cpu-shares keep a desktop responsive (nice does not reach containers); the
        # scratch folder on a tmpfs where memory allows (engine.scratch_tmpfs_args).
        "CIBW_CONTAINER_ENGINE": "docker; create_args: " + shlex.join(
            ["--network=host", "--cpu-shares=512", *scratch_tmpfs_args()]) + emulation_mounts(arch),
        "KILN_TORCH_VERSION": entry["torch"],
        "KILN_TORCH_INDEX": torch_index or standin_torch_index(base) or entry["torch_index"],
        "KILN_VARIANT": entry["kiln_variant"],
        "KILN_ABI_MODE": entry["mode"],
        "CCACHE_DIR": f"{HOST_MOUNT}{CCACHE_HOST_DIR}",
        "SOURCE_DATE_EPOCH": source_date_epoch(),
        "KILN_GIT_COMMIT": git_head(project.root),
        # The export carries uncommitted edits but no .git: the build info's git_dirty comes from here.
        "KILN_GIT_DIRTY": _dirty_flag(git_dirty(project.root)),
        "DOCKER_BUILDKIT": "0",
        # pip writes no bytecode for what it installs in the containers (torch's ~20 s of CPU each time, four
        # to six times a run): the build and the wheel's tests import what they use and compile only that.
        "PIP_NO_COMPILE": "1",
    })
    if skip_tests:
        env["CIBW_TEST_SKIP"] = "*"
    if base.standin is not None:
        from ..audit.release_rule import STANDIN_ENV

        env[STANDIN_ENV] = base.standin.manylinux_tag
        env.update(host_pip_sources())
    if find_links:
        local = " ".join(f"{HOST_MOUNT}{Path(folder).resolve()}" for folder in find_links)
        env["PIP_FIND_LINKS"] = " ".join(filter(None, [env.get("PIP_FIND_LINKS", ""), local]))
    env.update(extra_env or {})
    exe = [str(cibuildwheel)] if cibuildwheel else [sys.executable, "-m", "cibuildwheel"]
    run = CibwRun(job=job.name, identifiers=identifiers, image=image, base=base, log=log)
    out.mkdir(parents=True, exist_ok=True)
    before = set(out.glob("*.whl"))
    with tempfile.TemporaryDirectory(dir=STATE_DIR, prefix="cibw-project-") as tmp:
        export = export or export_tree(Path(tmp) / project.name, project.root)
        cmd = [*exe, "--platform", "linux", "--output-dir", str(out.resolve()),
               *cibuildwheel_config_args(project, matrix, Path(tmp)), str(export)]
        shown = {k: env[k] for k in sorted(env) if k.startswith(("CIBW_", "KILN_", "PIP_", "CCACHE_"))}
        with log.open("a") as fh:
            fh.write(f"$ {' '.join(cmd)}\n{json.dumps(shown, indent=2)}\n")
        started = time.monotonic()
        _stream(cmd, env, export, log, run, started)
        run.seconds = time.monotonic() - started
    made = sorted(set(out.glob("*.whl")) - before)
    run.wheels = [w for w in made if w.name.startswith(f"{project.wheel_name}-")]
    if len(run.wheels) != len(made):
        others = ", ".join(w.name for w in made if w not in run.wheels)
        raise ContainerError(f"cibuildwheel made wheels that are not {project.name}'s: {others}; see {log}")
    if len(run.wheels) != len(identifiers):
        raise ContainerError(f"cibuildwheel made {len(run.wheels)} wheel(s) for {len(identifiers)} identifier(s) "
                             f"({', '.join(identifiers)}); see {log}")
    return run


class ConfigRefused(ContainerError):
    """The project's [tool.cibuildwheel] table fails kiln (exit 2, before anything is built)."""

    exit_code = 2


def cibuildwheel_config_args(project: KilnProject, matrix: Matrix, folder: Path) -> list[str]:
    """cibuildwheel's config option for `project`: none when its [tool.cibuildwheel] table holds for kiln; a
    generated table (`kiln cibuildwheel --print-config`, written into `folder`) when it has none, so one
    [tool.kiln] table is all a project needs; ConfigRefused, one line per problem, when its table fails."""
    from .. import __version__
    from . import cibw_config

    try:
        table = cibw_config.load_table(project.root)
    except cibw_config.ConfigError as exc:
        raise ConfigRefused(str(exc)) from None
    if table is not None:
        problems = cibw_config.check(table, project, __version__)
        if problems:
            raise ConfigRefused(f"{project.root / 'pyproject.toml'}'s [tool.cibuildwheel] fails kiln "
                                "(kiln cibuildwheel --print-config gives one that holds):\n  " + "\n  ".join(problems))
        return []
    generated = folder / "kiln-cibuildwheel.toml"
    generated.write_text(cibw_config.render(cibw_config.generate(project, matrix, __version__), project,
                                            __version__))
    return ["--config-file", str(generated)]


def _stream(cmd: list[str], env: dict[str, str], cwd: Path, log: Path, run: CibwRun, started: float) -> None:
    current: tuple[str, str, float] | None = None
    identifier = run.identifiers[0] if run.identifiers else "?"
    with log.open("a") as fh:
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, text=True, errors="replace")
        assert proc.stdout is not None
        for line in proc.stdout:
            now = time.monotonic()
            fh.write(f"[{now - started:8.1f}] {line}")
            found = _IDENTIFIER.search(line)
            if found:
                identifier = found.group(1)
            for phase, pattern in _PHASES:
                if pattern.search(line):
                    if current is not None:
                        run.phases.append((current[0], current[1], now - current[2]))
                    current = (identifier, phase, now) if phase != "done" else None
                    if phase != "done":
                        print(f"containers: [{now - started:6.0f} s] {identifier}: {phase}", flush=True)
                    break
        rc = proc.wait()
    if current is not None:
        run.phases.append((current[0], current[1], time.monotonic() - current[2]))
    if rc != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        raise ContainerError(f"cibuildwheel failed (exit {rc}); the end of {log}:\n{tail}")


# The stand-in's torch index: download.pytorch.org is not reachable where no image registry is; PyPI
# plus this machine's package sources (host_pip_sources) stand in for it, and pip prefers the local
# builds (e.g. 2.13.0+cpu, whose local label sorts above PyPI's 2.13.0).
STANDIN_TORCH_INDEX = "https://pypi.org/simple"


def standin_torch_index(base: Base) -> str | None:
    return STANDIN_TORCH_INDEX if base.standin is not None else None


def emulation_mounts(arch: str) -> str:
    """Extra create_args for a container of an architecture this machine only emulates: a /proc/cpuinfo of
    that architecture and the CPU qemu emulates to match it (data/containers.json emulation says why)."""
    if arch == host_arch():
        return ""
    recipe = load_recipe().get("emulation", {})
    assert isinstance(recipe, dict)
    cpuinfo = recipe.get("cpuinfo", {}).get(arch)
    if not cpuinfo:
        return ""
    path = resources.data_path(str(cpuinfo))
    if not path.is_file():
        raise ContainerError(f"{path} is missing (data/containers.json emulation.cpuinfo)")
    mounts = f" --volume={path}:/proc/cpuinfo:ro"
    cpu = recipe.get("qemu_cpu", {}).get(arch)
    return mounts + (f" --env=QEMU_CPU={cpu}" if cpu else "")


def _dirty_flag(dirty: bool | None) -> str:
    """KILN_GIT_DIRTY: "1", "0", or empty where git could not tell."""
    return "" if dirty is None else ("1" if dirty else "0")


def git_head(source: Path) -> str:
    """The commit the export is made from (the export has no .git; the build info records it)."""
    proc = subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else "unknown"


def host_arch() -> str:
    return _platform.machine()
