"""What the container pipeline is measured by: reproducibility and the compile cost of a release.

- `repro`: the same commit built twice in the same image (ccache off, so every object is compiled
  again), the two wheels compared byte for byte; diffoscope explains a difference.
- `compile_cost`: one cibuildwheel run making two wheels of one CUDA variant (two CPythons), every
  compile metered by kiln's compile-meter (beside this module: CPU seconds, ccache's verdict, and whether
  the compile saw torch's or Python's headers): the second wheel's kernel cores (the compiles that saw
  neither, kiln_add_kernel_objects) must all be cache hits and its compile must cost a fraction of the
  first's.

Both serve the project kiln serves (kiln_tool.project), built from one export of its tree.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..epoch import source_date_epoch
from ..matrix_data import MatrixJob
from .cibw import HOST_MOUNT, export_tree, git_head, run_cibuildwheel
from .engine import STATE_DIR, ContainerError, Engine
from .images import Base

if TYPE_CHECKING:
    from ..project import KilnProject

METER = Path(__file__).resolve().with_name("compile-meter")
CORE = "core"  # the compile-meter's scope of a compile that saw neither torch's nor Python's headers


def repro(engine: Engine, base: Base, job: MatrixJob, pythons: tuple[str, ...], out: Path,
          log: Path, project: KilnProject, find_links: tuple[Path, ...] = (),
          against: tuple[Path, ...] = ()) -> dict[str, Any]:
    """Both builds from one export of the project's tree and one SOURCE_DATE_EPOCH: the same inputs.
    `against`: wheels an earlier run of the same commit made (kiln cibuildwheel: another export, ccache on,
    its tests run), standing for the first build; only the second is built, ccache off."""
    firsts: list[Path] = []
    seconds: list[Path] = []
    epoch = source_date_epoch()
    with tempfile.TemporaryDirectory(dir=STATE_DIR, prefix="repro-project-") as tmp:
        export = export_tree(Path(tmp) / project.name, project.root)
        for attempt in (1, 2):
            if attempt == 1 and against:
                firsts = sorted(against)
                _same_commit(firsts, project)
                continue
            folder = out / f"repro-{attempt}"
            if folder.exists():
                shutil.rmtree(folder)
            made = run_cibuildwheel(engine, base, job, folder, project=project, log=log, skip_tests=True,
                                    pythons=pythons, export=export, find_links=find_links,
                                    extra_env={"CCACHE_DISABLE": "1", "SOURCE_DATE_EPOCH": epoch}).wheels
            (firsts if attempt == 1 else seconds).extend(sorted(made))
    if [w.name for w in firsts] != [w.name for w in seconds]:
        raise ContainerError(f"the rebuild made {[w.name for w in seconds]}, not {[w.name for w in firsts]}"
                             + (" (--against: wheels of another job or commit?)" if against else ""))
    result: dict[str, Any] = {"job": job.name, "identical": True, "wheels": [],
                              "first_build": "the given wheels" if against else "built here"}
    for first, second in zip(firsts, seconds, strict=True):
        same = first.name == second.name and first.read_bytes() == second.read_bytes()
        entry: dict[str, Any] = {"name": first.name, "identical": same}
        if not same:
            result["identical"] = False
            report = out / f"repro-{first.stem}.diffoscope.txt"
            diffoscope = shutil.which("diffoscope")
            if diffoscope:
                proc = subprocess.run([diffoscope, "--text", str(report), str(first), str(second)],
                                      capture_output=True, text=True)
                entry["diffoscope"] = str(report) if report.exists() else proc.stderr.strip()[-500:]
            else:
                entry["diffoscope"] = "diffoscope is not installed (scripts/ci/system-deps.sh installs it)"
        result["wheels"].append(entry)
    return result


def _same_commit(wheels: list[Path], project: KilnProject) -> None:
    """--against wheels must be builds of the commit the tree is at (their build info says which)."""
    import json
    import zipfile

    head = git_head(project.root)
    for wheel in wheels:
        try:
            with zipfile.ZipFile(wheel) as archive:
                info = json.loads(archive.read(f"{project.package}/_build_info.json"))
        except (OSError, KeyError, ValueError, zipfile.BadZipFile) as exc:
            raise ContainerError(f"--against {wheel.name}: no readable {project.package}/_build_info.json "
                                 f"({exc})") from None
        if info.get("git_commit") != head:
            raise ContainerError(f"--against {wheel.name} was built from commit {info.get('git_commit')}, the tree is "
                                 f"at {head}: build it again (make cibuildwheel) or leave --against out")


@dataclass
class WheelCompile:
    build: str
    objects: int
    cpu_seconds: float
    hits: int
    misses: int
    kernel_core_objects: int
    kernel_core_misses: int


def _verdicts(statslog: Path) -> dict[str, str]:
    """source -> "hit" or "miss", from a ccache stats log (a '# source' line, then its counters)."""
    verdicts: dict[str, str] = {}
    current = None
    for line in statslog.read_text().splitlines() if statslog.exists() else []:
        if line.startswith("# "):
            current = line[2:].strip()
        elif current is not None and line in ("direct_cache_hit", "preprocessed_cache_hit"):
            verdicts[current] = "hit"
        elif current is not None and line == "cache_miss":
            verdicts[current] = "miss"
    return verdicts


def read_meter(meter: Path) -> list[WheelCompile]:
    builds = []
    for table in sorted(meter.glob("*.tsv")):
        rows = [line.split("\t") for line in table.read_text().splitlines() if line.strip()]
        verdicts = _verdicts(table.with_suffix(".statslog"))
        cores = [r for r in rows if len(r) > 3 and r[3] == CORE]
        core_sources = {Path(r[0]).name.removesuffix(".o") for r in cores}
        builds.append(WheelCompile(
            build=table.stem, objects=len(rows), cpu_seconds=sum(float(r[1]) for r in rows),
            hits=sum(1 for v in verdicts.values() if v == "hit"),
            misses=sum(1 for v in verdicts.values() if v == "miss"),
            kernel_core_objects=len(cores),
            kernel_core_misses=sum(1 for source, v in verdicts.items()
                                   if v == "miss" and Path(source).name in core_sources)))
    return builds


def compile_cost(engine: Engine, base: Base, job: MatrixJob, pythons: tuple[str, ...], out: Path,
                 log: Path, project: KilnProject, find_links: tuple[Path, ...] = ()) -> dict[str, Any]:
    stamp = time.strftime("%Y%m%dT%H%M%S")
    meter = STATE_DIR / f"compile-meter-{stamp}"
    cache = STATE_DIR / f"ccache-cold-{stamp}"
    tool = STATE_DIR / f"compile-meter-{stamp}-bin"
    for folder in (meter, cache, tool):
        folder.mkdir(parents=True)
    # The containers see the host's / under /host; a copy of the meter is executable however kiln was installed.
    launcher = tool / METER.name
    shutil.copyfile(METER, launcher)
    launcher.chmod(0o700)
    launchers = " ".join(f"CMAKE_{lang}_COMPILER_LAUNCHER={HOST_MOUNT}{launcher}" for lang in ("C", "CXX", "CUDA"))
    wheels = out / "compile-cost"
    if wheels.exists():
        shutil.rmtree(wheels)
    try:
        run = run_cibuildwheel(engine, base, job, wheels, project=project, log=log, skip_tests=True, pythons=pythons,
                               find_links=find_links, extra_env={"CCACHE_DIR": f"{HOST_MOUNT}{cache}",
                                          "CIBW_ENVIRONMENT_LINUX": f"{launchers} KILN_COMPILE_METER_DIR="
                                                                    f"{HOST_MOUNT}{meter}"})
        builds = read_meter(meter)
        if not builds:
            raise ContainerError(f"the compile meter saw no compile of {project.name}: its build runs no CMake "
                                 f"compiler launcher (a backend build is not metered); see {log}")
    finally:
        for folder in (cache, meter, tool):
            shutil.rmtree(folder, ignore_errors=True)
    # cibuildwheel builds in the order of CIBW_BUILD, which is the order of `pythons`.
    order = {f"cp{p.replace('.', '')}": i for i, p in enumerate(pythons)}
    builds.sort(key=lambda b: order.get(b.build.split("-")[0], 99))
    result: dict[str, Any] = {"job": job.name, "identifiers": list(run.identifiers), "wheels": [
        {"build": b.build, "objects": b.objects, "compile_cpu_seconds": round(b.cpu_seconds, 1),
         "ccache_hits": b.hits, "ccache_misses": b.misses,
         "hit_rate": round(b.hits / (b.hits + b.misses), 3) if b.hits + b.misses else None,
         "kernel_core_objects": b.kernel_core_objects, "kernel_core_misses": b.kernel_core_misses}
        for b in builds]}
    if len(builds) >= 2 and builds[0].cpu_seconds > 0:
        ratio = builds[1].cpu_seconds / builds[0].cpu_seconds
        result["second_over_first"] = round(ratio, 3)
        result["target_met"] = ratio <= 0.25 and builds[1].kernel_core_misses == 0
    return result
