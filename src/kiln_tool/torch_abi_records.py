"""The torch ABI records built wheels need: which torches are missing, fetching their wheels, recording them.

The record format and its reader are kiln_tool.audit.torch_abi; this module is what `kiln torch-abi
--for-wheels` and the release path (kiln_tool.release) share: for each torch a built wheel's build
info names that is neither recorded nor installed, download that torch's wheel from the matrix's
torch index (pip download --no-deps, never installed) and record its exports.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

Say = Callable[[str], None]


def needed_torches(wheels: list[Path]) -> list[str]:
    """The torch versions the build infos of `wheels` name that are neither recorded nor installed, in the
    order first named."""
    from .audit import inputs
    from .audit.policy import DEFAULT_POLICY, load_policy
    from .audit.target import candidate_lib_dirs, torch_version_at
    from .audit.torch_abi import recorded_versions

    have = set(recorded_versions()) | {torch_version_at(lib) for lib in candidate_lib_dirs()}
    needed: list[str] = []
    for path in wheels:
        whl = inputs.open_wheel(path, load_policy(DEFAULT_POLICY).limits)
        try:
            info = whl.build_info() or {}
        finally:
            whl.close()
        version = str(info.get("torch_version") or "")
        if version and version not in have and version not in needed:
            needed.append(version)
    return needed


def download_torch(version: str, into: Path) -> Path:
    """torch `version`'s wheel for this interpreter's Python, from the matrix's index of its variant.
    Raises subprocess.CalledProcessError when pip cannot download it."""
    from . import matrix_data

    variant = version.partition("+")[2] or "cpu"
    index = matrix_data.load().index_url(variant)
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", python, "--index-url", index, f"torch==={version}", "-d", str(into)],
                   check=True)
    (wheel,) = sorted(into.glob("torch-*.whl"))
    return wheel


def record_torch_wheel(wheel: Path, extra: tuple[Path, ...], out: Path, say: Say = print) -> Path:
    """Record the exports of a torch wheel (and of `extra` wheels whose libraries torch loads) into `out`."""
    from .audit.torch_abi import record_wheel, write_record

    record = record_wheel(wheel, extra)
    target = write_record(record, out)
    counts = ", ".join(f"{Path(m).name} {e['count']}" for m, e in record["libraries"].items())
    say(f"wrote {target} ({target.stat().st_size} bytes): torch {record['torch_version']}; {counts}")
    return target


def record_needed_torches(wheels: list[Path], out: Path, extra: tuple[Path, ...] = (),
                          say: Say = print) -> list[str]:
    """Download and record each torch of needed_torches(wheels) into `out`; the versions recorded."""
    needed = needed_torches(wheels)
    for version in needed:
        with tempfile.TemporaryDirectory(prefix="kiln-torch-abi-") as tmp:
            record_torch_wheel(download_torch(version, Path(tmp)), extra, out, say)
    return needed
