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


def _wheel_arch(whl: object) -> str:
    from .audit.policy import manylinux_policy_of_tag
    from .audit.torch_abi import DEFAULT_ARCH

    for tag in whl.name.platform_tags:  # type: ignore[attr-defined]
        claim = manylinux_policy_of_tag(tag)
        if claim is not None:
            return str(claim[1])
        if tag.startswith("linux_"):
            return str(tag.split("_", 1)[1])
    return DEFAULT_ARCH


def needed_torches(wheels: list[Path]) -> list[str]:
    """The torches the build infos of `wheels` name that are neither recorded nor installed for the wheel's
    processor, in the order first named: '2.13.0+cpu' for x86_64, '2.13.0+cpu-aarch64' (a record's file stem)
    for another processor, whose torch is never installed here."""
    from .audit import inputs
    from .audit.policy import DEFAULT_POLICY, load_policy
    from .audit.target import candidate_lib_dirs, torch_arch, torch_version_at
    from .audit.torch_abi import DEFAULT_ARCH, recorded_archs

    recorded = {(v, arch) for arch, versions in recorded_archs().items() for v in versions}
    installed = {(torch_version_at(lib), torch_arch(lib) or DEFAULT_ARCH) for lib in candidate_lib_dirs()}
    needed: list[str] = []
    for path in wheels:
        whl = inputs.open_wheel(path, load_policy(DEFAULT_POLICY).limits)
        try:
            info = whl.build_info() or {}
            arch = _wheel_arch(whl)
        finally:
            whl.close()
        version = str(info.get("torch_version") or "")
        name = version if arch == DEFAULT_ARCH else f"{version}-{arch}"
        if version and (version, arch) not in recorded | installed and name not in needed:
            needed.append(name)
    return needed


def download_torch(version: str, into: Path) -> Path:
    """torch `version`'s wheel for this interpreter's Python, from the matrix's index of its variant;
    '2.13.0+cpu-aarch64': that torch's manylinux wheel for aarch64. Raises subprocess.CalledProcessError when
    pip cannot download it."""
    from . import matrix_data

    version, _, arch = version.partition("-")
    variant = version.partition("+")[2] or "cpu"
    index = matrix_data.load().index_url(variant)
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    platforms = [a for p in (f"manylinux_2_28_{arch}", f"manylinux2014_{arch}") for a in ("--platform", p)] \
        if arch else []
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", python, *platforms, "--index-url", index, f"torch==={version}",
                    "-d", str(into)], check=True)
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
