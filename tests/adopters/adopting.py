"""What the adopter tests share (conftest.py holds the fixtures): the installed tool, fresh clones of the
fixture projects, `kiln` runs in an adopter's environment, and readers of what the wheels hold."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
PROJECTS = Path(__file__).resolve().parent / "projects"
ARTIFACTS = REPO / "tests" / "_artifacts" / "adopters"
COMMIT_DATE = "2026-11-30T12:00:00+00:00"
"""When every fixture clone's one commit was made: its SOURCE_DATE_EPOCH."""
KILN_TIMEOUT_S = 1800

TIMINGS: dict[str, float] = {}
"""Seconds per step of this session, printed at its end (conftest.py)."""


@contextmanager
def timed(name: str) -> Iterator[None]:
    started = time.perf_counter()
    try:
        yield
    finally:
        TIMINGS[name] = round(time.perf_counter() - started, 1)


def table_lines(project: Path) -> int:
    """Non-blank lines of the `[tool.kiln]` table of `project`'s pyproject.toml, its header included."""
    lines = (project / "pyproject.toml").read_text().splitlines()
    start = lines.index("[tool.kiln]")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("[")), len(lines))
    return len([line for line in lines[start:end] if line.strip()])


def config_line_counts() -> dict[str, int]:
    """Each fixture project's `[tool.kiln]` lines and CMakeLists.txt lines (the issue's limit: 20 each)."""
    counts: dict[str, int] = {}
    for project in sorted(p for p in PROJECTS.iterdir() if p.is_dir()):
        counts[f"{project.name} [tool.kiln]"] = table_lines(project)
        cmakelists = project / "CMakeLists.txt"
        if cmakelists.exists():
            counts[f"{project.name} CMakeLists.txt"] = len(cmakelists.read_text().splitlines())
    return counts


def adopter_env(bin_dir: Path) -> dict[str, str]:
    """This session's environment as an adopter's shell has it: `bin_dir` first on PATH, no KILN_*/OPKILN_*
    settings, no active venv and no PYTHONPATH (nothing of this checkout is importable)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KILN_", "OPKILN_", "PYTEST_"))
           and k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return env


@dataclass(frozen=True)
class KilnTool:
    """The installed tool: a venv holding the torch-kiln wheel and its dependencies, nothing else."""

    venv: Path
    wheel: Path
    workdir: Path
    """Where its commands start: a folder outside this checkout."""

    @property
    def kiln(self) -> Path:
        return self.venv / "bin" / "kiln"

    def run(self, *args: str | Path, timeout: float = KILN_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.kiln), *map(str, args)], cwd=self.workdir,
                              env=adopter_env(self.venv / "bin"), capture_output=True, text=True, timeout=timeout,
                              check=False)


def install_tool(wheel: Path, root: Path) -> KilnTool:
    """What the README tells an adopter: `python -m venv`, then pip install the tool's wheel into it."""
    venv = root / "venv"
    base = Path(getattr(sys, "_base_executable", sys.executable))
    subprocess.run([str(base), "-m", "venv", str(venv)], check=True)
    proc = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
                           "--disable-pip-version-check", str(wheel)],
                          capture_output=True, text=True, env=adopter_env(venv / "bin"), check=False)
    assert proc.returncode == 0, f"pip install {wheel.name} failed:\n{proc.stdout}{proc.stderr}"
    workdir = root / "work"
    workdir.mkdir()
    return KilnTool(venv=venv, wheel=wheel, workdir=workdir)


def clone_project(name: str, parent: Path) -> Path:
    """tests/adopters/projects/<name> as a fresh clone has it: copied to parent/<name>, a repository of its
    own with one commit made at COMMIT_DATE."""
    root = parent / name
    shutil.copytree(PROJECTS / name, root,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".venvs", "dist", "build", "*.egg-info"))
    who = {"GIT_AUTHOR_NAME": "adopter", "GIT_AUTHOR_EMAIL": "adopter@example.org",
           "GIT_COMMITTER_NAME": "adopter", "GIT_COMMITTER_EMAIL": "adopter@example.org"}
    env = {**os.environ, **who, "GIT_AUTHOR_DATE": COMMIT_DATE, "GIT_COMMITTER_DATE": COMMIT_DATE}
    for args in (["init", "--quiet", "--initial-branch=main"], ["add", "--all"],
                 ["commit", "--quiet", "--no-gpg-sign", "-m", f"{name}: first commit"]):
        subprocess.run(["git", "-C", str(root), *args], check=True, env=env, capture_output=True)
    return root


def head_commit(root: Path) -> str:
    return subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


@dataclass
class Built:
    """One `kiln -C <project> wheels ARGS` run: its process and the wheels it placed in <project>/dist/."""

    root: Path
    args: tuple[str, ...]
    proc: subprocess.CompletedProcess[str]
    new_wheels: list[Path] = field(default_factory=list)

    @property
    def output(self) -> str:
        shown = " ".join(self.args)
        return f"$ kiln -C {self.root} wheels {shown} (exit {self.proc.returncode})\n" + (
            self.proc.stdout + self.proc.stderr)[-8000:]

    def wheel(self, label: str) -> Path:
        """The one wheel of this run whose local version label is `label` (pt213cpu, pt214cu130): in dist/ when
        the audit passed it (exit 0), in dist/audit-failed/ beside its report when it did not (exit 1)."""
        found = [w for w in self.new_wheels if f"+{label}-" in w.name]
        assert len(found) == 1, f"expected one +{label} wheel in {self.root / 'dist'}, found {self.new_wheels}\n" \
            + self.output
        kept = found[0].parent.name == "audit-failed"
        assert self.proc.returncode == (1 if kept else 0), self.output
        if kept:
            assert found[0].with_name(found[0].name + ".audit.txt").is_file(), "the report is kept beside it"
            assert not (self.root / "dist" / found[0].name).exists(), "dist/ holds passing wheels only"
        return found[0]


def kiln_wheels(tool: KilnTool, root: Path, *args: str, timing: str) -> Built:
    def wheels() -> set[Path]:
        return set((root / "dist").glob("*.whl")) | set((root / "dist" / "audit-failed").glob("*.whl"))

    before = wheels()
    with timed(timing):
        proc = tool.run("-C", root, "wheels", *args)
    return Built(root, args, proc, sorted(wheels() - before))


# --- what a wheel holds ----------------------------------------------------------------------------------------

def wheel_metadata(wheel: Path) -> dict[str, list[str]]:
    """The headers of the wheel's METADATA: each name -> its values, in order."""
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
        text = zf.read(name).decode()
    headers: dict[str, list[str]] = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        if ": " in line and not line.startswith((" ", "\t")):
            key, value = line.split(": ", 1)
            headers.setdefault(key, []).append(value)
    return headers


def build_info(wheel: Path, package: str) -> dict[str, Any]:
    with zipfile.ZipFile(wheel) as zf:
        loaded: dict[str, Any] = json.loads(zf.read(f"{package}/_build_info.json"))
    return loaded


def libraries_in(wheel: Path, package: str) -> dict[str, bytes]:
    """The shared libraries of `package` in the wheel: member name -> bytes."""
    with zipfile.ZipFile(wheel) as zf:
        return {n: zf.read(n) for n in sorted(zf.namelist())
                if n.startswith(f"{package}/") and ".so" in n.rsplit("/", 1)[-1]}


def record_problems(wheel: Path) -> list[str]:
    """Where the wheel's RECORD and its members disagree (a member unlisted, a hash or size that is wrong)."""
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if not n.endswith("/")]
        (record,) = [n for n in names if n.count("/") == 1 and n.endswith(".dist-info/RECORD")]
        listed = {row[0]: row[1:] for row in csv.reader(io.StringIO(zf.read(record).decode())) if row}
        problems = [f"{n}: not in RECORD" for n in names if n not in listed]
        problems += [f"{n}: in RECORD, not in the wheel" for n in listed if n not in names]
        for name in names:
            if name == record or name not in listed:
                continue
            data = zf.read(name)
            digest = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            if listed[name] != [digest, str(len(data))]:
                problems.append(f"{name}: RECORD says {listed[name]}, the member is {[digest, str(len(data))]}")
    return problems


def zip_times(wheel: Path) -> set[tuple[int, ...]]:
    with zipfile.ZipFile(wheel) as zf:
        return {info.date_time for info in zf.infolist()}


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fatbin_entries(library: bytes) -> list[tuple[str, int]]:
    """("cubin" | "ptx", sm number) of each entry of the library's .nv_fatbin (layout: docs in toolchain notes:
    containers of magic 0xBA55ED50, entries with kind at +0, header size at +4, payload size at +8, sm at +0x1C)."""
    from elftools.elf.elffile import ELFFile

    section = ELFFile(io.BytesIO(library)).get_section_by_name(".nv_fatbin")
    if section is None:
        return []
    data = section.data()
    entries: list[tuple[str, int]] = []
    offset = 0
    while offset + 16 <= len(data):
        magic, _version, header, payload = struct.unpack_from("<IHHQ", data, offset)
        if magic != 0xBA55ED50:
            break
        entry, end = offset + header, offset + header + payload
        while entry + 0x20 <= end:
            kind, = struct.unpack_from("<H", data, entry)
            entry_header, entry_payload = struct.unpack_from("<IQ", data, entry + 4)
            sm, = struct.unpack_from("<I", data, entry + 0x1C)
            entries.append(({1: "ptx", 2: "cubin"}.get(kind, str(kind)), sm))
            entry += entry_header + entry_payload
        offset = end
    return entries


def audit_json(tool: KilnTool, *args: str | Path) -> tuple[int, dict[str, Any]]:
    """`kiln audit --json ARGS` of the installed tool: its exit status and its report."""
    proc = tool.run("audit", "--json", *args, timeout=600)
    try:
        doc: dict[str, Any] = json.loads(proc.stdout)
    except ValueError:
        pytest.fail(f"kiln audit --json printed no JSON (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return proc.returncode, doc


def failed_checks(doc: dict[str, Any]) -> set[tuple[str, str, str]]:
    """(library path, or '(wheel)', check id, severity) of each failed check of a `kiln audit --json` report."""
    found: set[tuple[str, str, str]] = set()
    for artifact in doc["artifacts"]:
        found |= {("(wheel)", c["id"], c["severity"]) for c in artifact["checks"] if not c["ok"]}
        for library in artifact["libraries"]:
            found |= {(library["path"], c["id"], c["severity"]) for c in library["checks"] if not c["ok"]}
    return found


# --- a user's venv ---------------------------------------------------------------------------------------------

def user_venv(path: Path, torch: str, wheels: Sequence[Path]) -> Path:
    """A fresh venv holding exactly torch==`torch` (from this machine's package sources) and `wheels`, installed
    without dependencies; returns its python."""
    from support.venvs import make_venv

    python = make_venv(path, torch)
    proc = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps",
                           "--disable-pip-version-check", *map(str, wheels)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return python


def run_python(python: Path, code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`code` run by `python` in `cwd` with an adopter's environment."""
    return subprocess.run([str(python), "-c", code], cwd=cwd, env=adopter_env(python.parent), capture_output=True,
                          text=True, timeout=600, check=False)


def own_table(project: str) -> dict[str, Any]:
    """The `[tool.kiln]` table of tests/adopters/projects/<project>."""
    with (PROJECTS / project / "pyproject.toml").open("rb") as fh:
        table: dict[str, Any] = tomllib.load(fh)["tool"]["kiln"]
    return table


def assert_repro_rebuilds(tool: KilnTool, clone: Path, built: Built, label: str, timing: str) -> None:
    """`kiln -C <clone> repro --once` builds once elsewhere (other path and filesystem, listing order, umask,
    locale, TZ, no compiler cache), and that is the very wheel `kiln wheels` made (its bytes, wherever it was
    kept). opkiln's own tests/repro runs the two-build form."""
    made = built.wheel(label)
    with timed(timing):
        proc = tool.run("-C", clone, "repro", "--once", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout)
    assert result["identical"] is True, result["differences"]
    assert result["once"] is True and len(result["builds"]) == 1, result
    assert result["builds"][0]["repaired_sha256"] == sha256_of(made), \
        "kiln repro's build is the very wheel kiln wheels made"
    # kiln repro itself compared it with dist/'s wheel (README), and said what it was doing as it went.
    assert result["dist_wheel"] == {"path": str(made), "sha256": sha256_of(made), "identical": True}, result
    assert "the one build, against dist/'s wheel," in proc.stderr, proc.stderr
