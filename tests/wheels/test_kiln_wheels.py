"""`kiln wheels` and `kiln repair`: what maintainers see when something is wrong."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from datetime import datetime, timezone
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
KILN = [sys.executable, str(REPO / "scripts" / "kiln")]


def kiln(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KILN, *args], capture_output=True, text=True, timeout=900,
                          env={**os.environ, **(env or {})})


def test_unknown_variant_is_a_usage_error() -> None:
    proc = kiln("wheels", "--variant", "cu999")
    assert proc.returncode == 2
    assert "cu999" in proc.stderr and "cpu" in proc.stderr and "cu130" in proc.stderr


@pytest.mark.slow
def test_a_failing_build_leaves_nothing_in_dist_and_says_where(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    # A bad arch list fails at configure time: quick, and a real failure of the real build.
    proc = kiln("wheels", "--variant", "cu130", "--dist", str(dist), env={"KILN_CUDA_ARCHS": "9.0;banana"})
    assert proc.returncode == 1
    assert "failed at build" in proc.stderr
    assert "'banana' is not a CUDA arch" in proc.stderr
    assert "torch2.14-cu130-py3.11.log" in proc.stderr
    assert not dist.exists() or list(dist.iterdir()) == []


def test_repair_refuses_a_file_that_is_not_a_wheel(tmp_path: Path) -> None:
    bogus = tmp_path / "notes.txt"
    bogus.write_text("not a wheel")
    proc = kiln("repair", str(bogus), "-w", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert "is not a wheel file" in proc.stderr
    fake = tmp_path / "opkiln-0.1.0-cp311-cp311-linux_x86_64.whl"
    fake.write_text("a wheel name, no zip inside")
    proc = kiln("repair", str(fake), "-w", str(tmp_path / "out"))
    assert proc.returncode == 2 and "is not a wheel file" in proc.stderr
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []
    missing = kiln("repair", str(tmp_path / "missing.whl"), "-w", str(tmp_path / "out"))
    assert missing.returncode == 2 and "no such file" in missing.stderr


def test_repaired_wheels_carry_the_commit_time_not_the_wall_clock(cpu_wheel: Path, tmp_path: Path) -> None:
    # kiln repair rewrites the zip; without SOURCE_DATE_EPOCH each run would date it anew.
    env = {k: v for k, v in os.environ.items() if k != "SOURCE_DATE_EPOCH"}
    proc = subprocess.run([*KILN, "repair", str(cpu_wheel), "-w", str(tmp_path)], capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr
    commit_time = int(subprocess.run(["git", "-C", str(REPO), "log", "-1", "--format=%ct"], capture_output=True,
                                     text=True, check=True).stdout)
    expected = datetime.fromtimestamp(max(commit_time, 315532800), tz=timezone.utc).timetuple()[:6]
    (repaired,) = tmp_path.glob("*.whl")
    with zipfile.ZipFile(repaired) as zf:
        stamps = {info.date_time for info in zf.infolist()}
    # zip time stamps have a 2-second resolution
    assert len(stamps) == 1
    (stamp,) = stamps
    assert stamp[:5] == expected[:5] and abs(stamp[5] - expected[5]) <= 1
