"""kiln cibuildwheel, release-rehearsal and release refuse unusable input with exit 2 and one line, before
they start an engine, build an image or write anything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def kiln(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(REPO / "scripts" / "kiln"), *args], capture_output=True, text=True,
                          cwd=cwd, timeout=120)


@pytest.mark.parametrize(("args", "message"), [
    (["cibuildwheel", "--variant", "cu999"], "--variant cu999: not a local combination of data/matrix.json"),
    (["cibuildwheel", "--variant", "cpu", "--python", "2.7"], "has no job for torch 2.13.0 cpu"),
])
def test_kiln_cibuildwheel_refuses_what_the_matrix_does_not_build(args: list[str], message: str,
                                                                  tmp_path: Path) -> None:
    result = kiln(*args, "--out", str(tmp_path / "out"), "--logs", str(tmp_path / "logs"))
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "logs").exists()


def test_kiln_release_rehearsal_needs_the_cibuildwheel_wheels(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = kiln("release-rehearsal", "--wheels", str(tmp_path / "empty"), "--work", str(tmp_path / "work"))
    assert result.returncode == 2 and "run `make cibuildwheel` first" in result.stderr
    assert not (tmp_path / "work").exists()


def test_kiln_release_refuses_an_empty_dist_and_a_site_that_is_not_empty(tmp_path: Path) -> None:
    (tmp_path / "dist").mkdir()
    result = kiln("release", str(tmp_path / "dist"), str(tmp_path / "site"), "--base-url", "http://127.0.0.1:9/")
    assert result.returncode == 2 and "holds no wheel" in result.stderr
    assert not (tmp_path / "site").exists()
    (tmp_path / "dist" / "opkiln-0.1.0-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"x")
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "stale.html").write_text("old")
    result = kiln("release", str(tmp_path / "dist"), str(tmp_path / "site"), "--base-url", "http://127.0.0.1:9/")
    assert result.returncode == 2 and "is not empty" in result.stderr
    assert [p.name for p in (tmp_path / "site").iterdir()] == ["stale.html"]
