"""Build the configured project's sources twice under different conditions and compare the wheels byte for byte.

The two builds differ in: absolute source and build directory (and the
filesystem: ext4 vs tmpfs, so directory listing order differs too), the order
in which source files were created, umask, locale, time zone and wall-clock
time. Both use SOURCE_DATE_EPOCH from the commit and no compiler cache, and
both wheels go through the same auditwheel repair as releases do. When dist/ holds
the wheel of the same name (`kiln wheels` made it), both builds must also be that
wheel, byte for byte.

With ``once``, only the second build runs (the other path, filesystem, listing order, umask, locale and time
zone, no compiler cache) and dist/'s wheel is the first: `kiln wheels` made it in the checkout, with the compiler
cache, so the two still differ in every condition. There must be such a wheel, of the same sources and settings.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .build_env import ensure_build_env
from .epoch import source_date_epoch
from .matrix_data import BuildSpec
from .pipeline import PipelineError, build_wheel
from .project import KilnProject, current_project
from .repair import repair_wheel


@dataclass(frozen=True)
class Condition:
    name: str
    root: Path
    umask: int
    env: dict[str, str]
    reverse_copy: bool


def conditions(base_a: Path, base_b: Path) -> tuple[Condition, Condition]:
    return (
        Condition("a", base_a / "src", 0o022, {"TZ": "UTC", "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}, False),
        Condition("b", base_b / "a" / "much" / "deeper" / "checkout", 0o077,
                  {"TZ": "Pacific/Chatham", "LC_ALL": "POSIX", "LANG": "fr_FR.UTF-8"}, True),
    )


def source_files(repo: Path) -> list[str]:
    out = subprocess.run(["git", "-C", str(repo), "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
                         capture_output=True, check=True)
    return sorted(p for p in out.stdout.decode().split("\0") if p and (repo / p).is_file())


def git_commit(repo: Path) -> str:
    out = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def copy_tree(files: list[str], dest: Path, reverse: bool, repo: Path) -> None:
    for rel in (reversed(files) if reverse else files):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / rel, target)


@dataclass
class Build:
    condition: str
    built: Path
    repaired: Path
    built_sha256: str = ""
    repaired_sha256: str = ""

    def __post_init__(self) -> None:
        self.built_sha256 = self.built_sha256 or sha256(self.built)
        self.repaired_sha256 = self.repaired_sha256 or sha256(self.repaired)

    def digests(self) -> tuple[str, str]:
        return self.built_sha256, self.repaired_sha256


@dataclass
class ReproResult:
    spec: BuildSpec
    builds: list[Build] = field(default_factory=list)
    differences: list[str] = field(default_factory=list)
    diffoscope: str | None = None
    dist_wheel: Path | None = None
    """The wheel of the same name that `kiln wheels` placed in dist/ (or dist/audit-failed/), when there is one."""
    dist_sha256: str | None = None
    dist_note: str = ""
    """Why dist/'s wheel of that name was not compared (built from other sources)."""

    @property
    def identical(self) -> bool:
        a, b = self.builds[0], self.builds[-1]
        if len(self.builds) == 1:  # --once: dist/'s wheel is the other build
            return self.dist_sha256 == a.repaired_sha256
        return a.digests() == b.digests() and self.dist_sha256 in (None, a.repaired_sha256)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build_once(spec: BuildSpec, python: Path, condition: Condition, out: Path, log: Path, commit: str,
               epoch: str) -> Build:
    old_umask = os.umask(condition.umask)
    try:
        # The rebuild's tree is the commit alone: its build info says so (git_dirty false), as a clean build's does.
        env = {**condition.env, "KILN_CCACHE": "0", "KILN_GIT_COMMIT": commit, "KILN_GIT_DIRTY": "0",
               "SOURCE_DATE_EPOCH": epoch}
        built = build_wheel(python, spec, out / "built", log, condition.root / "build", env, source=condition.root)
        repaired = repair_wheel(built, out / "repaired", epoch)
    finally:
        os.umask(old_umask)
    return Build(condition.name, built, repaired)


def explain_difference(a: Path, b: Path) -> list[str]:
    """Which zip members differ, and for ELF members which sections."""
    lines: list[str] = []
    with zipfile.ZipFile(a) as za, zipfile.ZipFile(b) as zb:
        ia = {i.filename: i for i in za.infolist()}
        ib = {i.filename: i for i in zb.infolist()}
        if list(ia) != list(ib):
            lines.append(f"member lists differ: {sorted(set(ia) ^ set(ib)) or 'same names, different order'}")
        for name in sorted(set(ia) & set(ib)):
            x, y = ia[name], ib[name]
            if (x.date_time, x.external_attr) != (y.date_time, y.external_attr):
                lines.append(f"{name}: zip metadata differs (time {x.date_time} vs {y.date_time}, "
                             f"mode {x.external_attr >> 16:o} vs {y.external_attr >> 16:o})")
            da, db = za.read(name), zb.read(name)
            if da != db:
                lines.append(f"{name}: contents differ ({len(da)} vs {len(db)} bytes)")
                if da[:4] == b"\x7fELF" and db[:4] == b"\x7fELF":
                    lines += [f"  section {s}" for s in _elf_section_diff(da, db)]
    return lines


def _elf_section_diff(a: bytes, b: bytes) -> list[str]:
    from elftools.elf.elffile import ELFFile

    ea, eb = ELFFile(io.BytesIO(a)), ELFFile(io.BytesIO(b))
    sa = {s.name: s.data() for s in ea.iter_sections() if s.header["sh_type"] != "SHT_NOBITS"}
    sb = {s.name: s.data() for s in eb.iter_sections() if s.header["sh_type"] != "SHT_NOBITS"}
    return [f"{n} ({len(sa.get(n, b''))} vs {len(sb.get(n, b''))} bytes)" for n in sorted(set(sa) | set(sb))
            if sa.get(n) != sb.get(n)]


def diffoscope(a: Path, b: Path, max_lines: int = 120) -> str | None:
    exe = shutil.which("diffoscope")
    if exe is None:
        return None
    proc = subprocess.run([exe, "--no-progress", "--text", "-", str(a), str(b)], capture_output=True, text=True)
    return "\n".join(proc.stdout.splitlines()[:max_lines])


SETTINGS_KEYS = ("source_hash", "git_commit", "git_dirty", "abi_mode", "cuda_tag", "cuda_archs", "flags")
"""Build info fields that are inputs of a build (its sources and its settings), not results of it: a wheel of
dist/ is a fair reference for the rebuild only where all of them agree (KILN_CUDA_ARCHS, say, changes the
fatbin by design)."""


def build_settings_of(wheel: Path) -> dict[str, object] | None:
    """SETTINGS_KEYS of the wheel's <package>/_build_info.json (None without a readable one)."""
    import json

    try:
        with zipfile.ZipFile(wheel) as zf:
            names = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith("/_build_info.json")]
            if len(names) != 1 or zf.getinfo(names[0]).file_size > 1 << 20:
                return None
            doc = json.loads(zf.read(names[0]))
    except (OSError, zipfile.BadZipFile, ValueError, KeyError):
        return None
    return {key: doc.get(key) for key in SETTINGS_KEYS} if isinstance(doc, dict) else None


def settings_difference(reference: Path, rebuilt: Path) -> str:
    """'' when both wheels were built from the same sources with the same settings, else the first field
    that differs, shown as 'field (reference vs rebuilt)'."""
    ours, theirs = build_settings_of(reference), build_settings_of(rebuilt)
    if ours is None or theirs is None:
        return "_build_info.json (unreadable in one of them)"
    for key in SETTINGS_KEYS:
        if ours[key] != theirs[key]:
            return f"{key} ({ours[key]!r} vs {theirs[key]!r})"
    return ""


def dist_wheel(dist: Path, name: str) -> Path | None:
    """dist/<name>, else dist/audit-failed/<name> (where `kiln wheels` keeps a wheel the audit refused)."""
    for candidate in (dist / name, dist / "audit-failed" / name):
        if candidate.is_file():
            return candidate
    return None


class NoReference(PipelineError):
    """--once found no wheel in dist/ to compare its one build with."""


def run_repro(spec: BuildSpec, logs: Path, keep: Path | None = None,
              project: KilnProject | None = None, progress: Callable[[str], None] | None = None,
              once: bool = False) -> ReproResult:
    """Build ``spec`` twice (kiln_tool.repro's conditions) and compare the two wheels with each other and with
    the wheel of the same name in the project's dist/, when `kiln wheels` left one there; ``progress`` is told
    each step as it starts. ``once``: build b alone and compare it with dist/'s wheel, which must be there
    (NoReference otherwise)."""
    say = progress or (lambda _message: None)
    project = project or current_project()
    dist = project.root / "dist"
    if once and not [*dist.glob("*.whl"), *dist.glob("audit-failed/*.whl")]:  # refused before any build
        raise NoReference("repro", f"{dist} holds no wheel: --once compares its build with the wheel kiln wheels "
                                   "made; run `kiln wheels` first, or drop --once for two builds")
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"repro-{spec.name}.log"
    log.write_text("")
    say(f"build venv {spec.name}")
    python = ensure_build_env(spec, log, project)
    files = source_files(project.root)
    commit = git_commit(project.root)
    epoch = source_date_epoch(project.root)
    result = ReproResult(spec)
    shm = Path("/dev/shm")  # noqa: S108 - a tmpfs on purpose: another filesystem, another listing order
    with tempfile.TemporaryDirectory(prefix="kiln-repro-a-") as ta, \
            tempfile.TemporaryDirectory(prefix="kiln-repro-b-", dir=shm if shm.is_dir() else None) as tb:
        both: tuple[Condition, ...] = conditions(Path(ta), Path(tb))[1:] if once else conditions(Path(ta), Path(tb))
        for condition in both:  # copy both trees before building: the same snapshot of the sources
            copy_tree(files, condition.root, condition.reverse_copy, project.root)
        for condition in both:
            out = Path(ta if condition.name == "a" else tb) / "out"
            which = "the one build, against dist/'s wheel," if once else f"build {condition.name} of 2"
            say(f"{which} in {condition.root} (umask {condition.umask:03o}, "
                f"TZ {condition.env['TZ']}, no compiler cache; log: {log})")
            try:
                result.builds.append(build_once(spec, python, condition, out, log, commit, epoch))
            except PipelineError as exc:
                raise PipelineError("repro", f"build {condition.name} failed: {exc}") from exc
        a, b = result.builds[0], result.builds[-1]
        result.dist_wheel = dist_wheel(project.root / "dist", a.repaired.name)
        differs = settings_difference(result.dist_wheel, a.repaired) if result.dist_wheel is not None else ""
        if differs:
            result.dist_note = (f"{result.dist_wheel} was built from other sources or settings (its build info's "
                                f"{differs}): not compared; kiln wheels rebuilds it")
            result.dist_wheel = None
        if once and result.dist_wheel is None:
            raise NoReference("repro", (result.dist_note or f"dist/ holds no {a.repaired.name}") +
                              ": --once compares its build with the wheel kiln wheels made; run `kiln wheels` "
                              "first, or drop --once for two builds")
        say(f"compare with {result.dist_wheel}" if once else
            f"compare with each other and with {result.dist_wheel or 'dist/ (no wheel of these sources there)'}")
        if result.dist_wheel is not None:
            result.dist_sha256 = sha256(result.dist_wheel)
            if result.dist_sha256 != a.repaired_sha256:
                result.differences.append(f"{result.dist_wheel} (kiln wheels) differs from build {a.condition}:")
                result.differences += ["  " + line for line in explain_difference(result.dist_wheel, a.repaired)]
        if not result.identical and not once:
            for label, x, y in (("built", a.built, b.built), ("repaired", a.repaired, b.repaired)):
                if sha256(x) != sha256(y):
                    result.differences.append(f"{label} wheels differ:")
                    result.differences += ["  " + line for line in explain_difference(x, y)]
        if not result.identical:
            if once and result.dist_wheel is not None:
                result.diffoscope = diffoscope(result.dist_wheel, a.repaired)
            else:
                result.diffoscope = diffoscope(a.repaired, b.repaired)
            if keep is not None:
                keep.mkdir(parents=True, exist_ok=True)
                for build in result.builds:
                    shutil.copy2(build.repaired, keep / f"{build.condition}-{build.repaired.name}")
                if once and result.dist_wheel is not None:
                    shutil.copy2(result.dist_wheel, keep / f"dist-{result.dist_wheel.name}")
        for build in result.builds:  # the temporary folders go away: keep names and digests
            build.built = Path(build.built.name)
            build.repaired = Path(build.repaired.name)
    return result
