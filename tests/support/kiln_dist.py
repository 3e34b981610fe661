"""The tool's own wheel (torch-kiln), as `make kiln-wheel` builds it, for tests that install kiln alone.

kiln_wheel() returns a wheel whose kiln_tool/ files are exactly this checkout's src/kiln_tool with its top-level
cmake/ and docker/ as kiln_tool/cmake and kiln_tool/docker (names and sha256, RECORD against the tree):
dist/kiln/'s when that one is, else one built into
tests/_artifacts/kiln-dist/ (once per session; a file lock keeps xdist workers from building at once).
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import functools
import hashlib
import subprocess
import zipfile
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "src" / "kiln_tool"
# What the wheel carries into kiln_tool/ from the checkout's top (packaging/kiln/pyproject.toml's force-include).
TOP_LEVEL = ("cmake", "docker")
PACKAGING = REPO / "packaging" / "kiln" / "pyproject.toml"
DIST = REPO / "dist" / "kiln"
ARTIFACTS = REPO / "tests" / "_artifacts" / "kiln-dist"


def build_kiln_wheel(out: Path, umask: int = 0o022) -> Path:
    """`make kiln-wheel KILN_WHEEL_DIR=out` (under `umask`); the one wheel it leaves in `out`."""
    proc = subprocess.run(["make", "--no-print-directory", "kiln-wheel", f"KILN_WHEEL_DIR={out}"], cwd=REPO,
                          capture_output=True, text=True, timeout=600, check=False, umask=umask)
    if proc.returncode != 0:
        raise AssertionError(f"make kiln-wheel failed ({proc.returncode}):\n{(proc.stdout + proc.stderr)[-4000:]}")
    wheels = sorted(out.glob("torch_kiln-*.whl"))
    if len(wheels) != 1:
        raise AssertionError(f"make kiln-wheel left {[w.name for w in wheels]} in {out}, not one wheel")
    return wheels[0]


def tree_files() -> dict[str, str]:
    """kiln_tool/<path> -> RECORD-style sha256 of every file of src/kiln_tool and of the top-level folders the wheel
    carries into kiln_tool/ (bytecode caches aside)."""
    files = {}
    roots = [(TOOL, ""), *((REPO / name, f"{name}/") for name in TOP_LEVEL)]
    for root, prefix in roots:
        for path in sorted(root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                digest = base64.urlsafe_b64encode(hashlib.sha256(path.read_bytes()).digest()).rstrip(b"=").decode()
                files[f"kiln_tool/{prefix}{path.relative_to(root).as_posix()}"] = f"sha256={digest}"
    return files


def wheel_tool_files(wheel: Path) -> dict[str, str]:
    """kiln_tool/<path> -> hash, as the wheel's RECORD lists them."""
    with zipfile.ZipFile(wheel) as zf:
        record = next(n for n in zf.namelist() if n.endswith(".dist-info/RECORD"))
        rows = [line.split(",") for line in zf.read(record).decode().splitlines() if line]
    return {row[0]: row[1] for row in rows if row[0].startswith("kiln_tool/")}


def up_to_date(folder: Path) -> Path | None:
    """The one torch-kiln wheel in `folder` when it holds exactly the tree's files and is newer than its
    packaging; else None."""
    wheels = sorted(folder.glob("torch_kiln-*.whl"))
    if len(wheels) != 1 or wheels[0].stat().st_mtime < PACKAGING.stat().st_mtime:
        return None
    try:
        return wheels[0] if wheel_tool_files(wheels[0]) == tree_files() else None
    except (OSError, zipfile.BadZipFile, StopIteration, IndexError):
        return None


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@functools.cache
def kiln_wheel() -> Path:
    """The torch-kiln wheel of this checkout (see the module docstring)."""
    with _locked(ARTIFACTS.parent / "kiln-dist.lock"):
        for folder in (DIST, ARTIFACTS):
            found = up_to_date(folder)
            if found is not None:
                return found
        return build_kiln_wheel(ARTIFACTS)
