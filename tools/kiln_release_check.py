#!/usr/bin/env python3
"""What release-kiln.yml checks of a torch-kiln release before it is attested and published.

    tools/kiln_release_check.py tag TAG      TAG is kiln-v<the version of src/kiln_tool/__init__.py>
    tools/kiln_release_check.py wheel WHEEL  the wheel is torch_kiln-<version>-py3-none-any.whl and holds exactly
                                             this checkout's tool (src/kiln_tool, cmake/ as kiln_tool/cmake,
                                             docker/ as kiln_tool/docker) by RECORD's sha256, and, installed
                                             into a fresh venv, runs: `kiln --version` names it and
                                             `kiln --cmake-dir` is a CMake package inside that venv

A failure prints one line and exits 1; a wrong call exits 2. Standard library only (it runs before anything
is installed).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import re
import subprocess
import sys
import tempfile
import venv
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TAG_PREFIX = "kiln-v"
# The wheel's kiln_tool/ is src/kiln_tool plus these top-level folders (packaging/kiln/pyproject.toml).
CARRIED = {"cmake": "cmake", "docker": "docker"}


class CheckError(Exception):
    pass


def tool_version() -> str:
    text = (REPO / "src" / "kiln_tool" / "__init__.py").read_text()
    match = re.search(r'^__version__ = "([^"]+)"$', text, re.M)
    if match is None:
        raise CheckError("src/kiln_tool/__init__.py sets no __version__")
    return match.group(1)


def check_tag(tag: str) -> str:
    version = tool_version()
    if tag != f"{TAG_PREFIX}{version}":
        raise CheckError(f"tag {tag!r} does not name the tool's version: torch-kiln is {version}, its tag is "
                         f"{TAG_PREFIX}{version}")
    return version


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def tree_files() -> dict[str, str]:
    """kiln_tool/<path> -> RECORD hash of every file the wheel must hold, from this checkout."""
    roots = [(REPO / "src" / "kiln_tool", "kiln_tool/")]
    roots += [(REPO / top, f"kiln_tool/{inside}/") for top, inside in CARRIED.items()]
    files = {}
    for root, prefix in roots:
        for path in sorted(root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                files[prefix + path.relative_to(root).as_posix()] = _digest(path.read_bytes())
    return files


def check_wheel(wheel: Path) -> str:
    version = tool_version()
    expected = f"torch_kiln-{version}-py3-none-any.whl"
    if wheel.name != expected:
        raise CheckError(f"{wheel.name} is not {expected}")
    try:
        with zipfile.ZipFile(wheel) as zf:
            record_name = f"torch_kiln-{version}.dist-info/RECORD"
            rows = list(csv.reader(io.StringIO(zf.read(record_name).decode())))
            for row in rows:  # RECORD against the bytes, so the comparison below is of what is inside
                if row and row[1] and _digest(zf.read(row[0])) != row[1]:
                    raise CheckError(f"{wheel.name}: {row[0]} does not match its RECORD hash")
    except (OSError, KeyError, zipfile.BadZipFile, UnicodeDecodeError) as exc:
        raise CheckError(f"{wheel.name}: unreadable wheel ({exc})") from None
    held = {row[0]: row[1] for row in rows if row and row[0].startswith("kiln_tool/")}
    want = tree_files()
    extra, missing = sorted(set(held) - set(want)), sorted(set(want) - set(held))
    changed = sorted(name for name in set(held) & set(want) if held[name] != want[name])
    if extra or missing or changed:
        raise CheckError(f"{wheel.name} is not this checkout's tool: extra {extra[:3]}, missing {missing[:3]}, "
                         f"changed {changed[:3]}")
    with tempfile.TemporaryDirectory(prefix="kiln-release-check-") as tmp:
        env_dir = Path(tmp) / "venv"
        venv.create(env_dir, with_pip=True)
        pip = subprocess.run([str(env_dir / "bin" / "python"), "-m", "pip", "install", "--quiet",
                              "--disable-pip-version-check", str(wheel)], capture_output=True, text=True)
        if pip.returncode != 0:
            raise CheckError(f"pip install {wheel.name} failed: {(pip.stderr.strip().splitlines() or ['?'])[-1]}")
        kiln = str(env_dir / "bin" / "kiln")
        shown = subprocess.run([kiln, "--version"], capture_output=True, text=True)
        if shown.returncode != 0 or version not in shown.stdout:
            raise CheckError(f"the installed kiln --version says {shown.stdout.strip()!r}, not {version}")
        cmake_dir = subprocess.run([kiln, "--cmake-dir"], capture_output=True, text=True)
        folder = Path(cmake_dir.stdout.strip())
        if cmake_dir.returncode != 0 or not folder.resolve().is_relative_to(env_dir.resolve()) \
                or not (folder / "KilnConfig.cmake").is_file():
            raise CheckError(f"the installed kiln --cmake-dir is {str(folder)!r}: no KilnConfig.cmake in its venv")
    return version


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("tag", "wheel"):
        print("usage: kiln_release_check.py tag TAG | wheel WHEEL", file=sys.stderr)
        return 2
    try:
        version = check_tag(argv[1]) if argv[0] == "tag" else check_wheel(Path(argv[1]))
    except CheckError as exc:
        print(f"kiln_release_check: {exc}", file=sys.stderr)
        return 1
    print(f"kiln_release_check: {argv[0]} {argv[1]}: torch-kiln {version}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
