"""A wheel's libraries are for the processor its tag names: an x86_64 build under an aarch64 tag (or a foreign
tag's machine in general) fails the audit and is never listed by the index."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from index.synthetic_wheels import make_wheel

REPO = Path(__file__).resolve().parents[2]


def _extension(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as archive:
        (member,) = [n for n in archive.namelist() if n.startswith("opkiln/_C") and n.endswith(".so")]
        return archive.read(member)


def kiln(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(REPO / "scripts" / "kiln"), *map(str, args)], capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("platform", ["manylinux_2_28_aarch64", "manylinux_2_34_aarch64"])
def test_an_x86_64_library_under_an_aarch64_tag_fails_the_audit_and_the_index(cpu_wheel: Path, tmp_path: Path,
                                                                              platform: str) -> None:
    wheel = make_wheel(tmp_path / "dist", platform=platform,
                       extra_files={"opkiln/_C.cpython-311-aarch64-linux-gnu.so": _extension(cpu_wheel)})
    audit = kiln("audit", wheel)
    assert audit.returncode == 1, audit.stdout + audit.stderr
    text = " ".join(audit.stdout.split())
    assert "foreign ELF: 64-bit EM_X86_64, expected 64-bit EM_AARCH64 for aarch64" in text
    index = kiln("index", tmp_path / "dist", tmp_path / "site")
    assert index.returncode in (1, 2), index.stdout + index.stderr
    assert not (tmp_path / "site").exists() or wheel.name not in (tmp_path / "site" / "kiln-index.json").read_text()
