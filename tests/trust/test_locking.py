"""Runs on one output folder are serialized by a lock keyed on its canonical path, whether or not the
folder (or its parents) exist yet; a staging folder is never removed while the run that owns it lives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from index.synthetic_wheels import make_wheel
from trust.kiln_runs import KILN, REPO, kiln

HOLDER = """
import sys
sys.path.insert(0, "src")
from pathlib import Path
from kiln_tool.index.locking import Staging
staging = Staging.create(Path(sys.argv[1]))
print(staging.path, flush=True)
sys.stdin.read()
"""


def test_the_lock_is_keyed_on_the_canonical_path_before_and_after_it_exists(tmp_path: Path) -> None:
    from kiln_tool.index.locking import lock_path

    out = tmp_path / "a" / "b" / "site"
    before = lock_path(out)
    assert lock_path(tmp_path / "a" / "x" / ".." / "b" / "site") == before
    out.parent.mkdir(parents=True)
    assert lock_path(out) == before
    os.symlink(tmp_path / "a", tmp_path / "link")
    assert lock_path(tmp_path / "link" / "b" / "site") == before
    out.mkdir()
    assert lock_path(out) == before
    assert lock_path(tmp_path / "a" / "b" / "other") != before


def test_two_runs_on_a_not_yet_existing_output_both_land(tmp_path: Path) -> None:
    """Two real processes at once, on an OUT whose parents do not exist yet: both wheels are published."""
    out = tmp_path / "new" / "deeper" / "site"
    dists = [make_wheel(tmp_path / f"dist{i}", version=f"0.{i}.0+pt213cpu").parent for i in (1, 2, 3)]
    runs = [subprocess.Popen([sys.executable, str(KILN), "index", str(dist), str(out)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for dist in dists]
    results = [(run.wait(timeout=300), *run.communicate()) for run in runs]
    for code, stdout, stderr in results:
        assert code == 0, stdout + stderr
    listed = {w["filename"] for w in json.loads((out / "kiln-index.json").read_text())["wheels"]}
    assert listed == {f"opkiln-0.{i}.0+pt213cpu-cp311-cp311-linux_x86_64.whl" for i in (1, 2, 3)}
    assert sorted(p.name for p in out.parent.iterdir()) == ["site"]  # no staging left behind


def test_a_live_runs_staging_is_kept_and_a_dead_ones_removed(tmp_path: Path) -> None:
    out = tmp_path / "site"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert holder.stdout is not None
        live = Path(holder.stdout.readline().strip())
        assert live.is_dir()
        make_wheel(tmp_path / "dist")
        first = subprocess.run([sys.executable, str(KILN), "index", str(tmp_path / "dist"), str(out)],
                               capture_output=True, text=True, timeout=300)
        assert first.returncode == 0, first.stderr
        assert live.is_dir(), "a live run's staging folder was removed"
    finally:
        holder.communicate("", timeout=60)
    assert holder.returncode == 0
    make_wheel(tmp_path / "dist2", version="0.2.0+pt213cpu")
    second = subprocess.run([sys.executable, str(KILN), "index", str(tmp_path / "dist2"), str(out)],
                            capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr
    assert not live.exists()
    assert f"removed {live}" in second.stdout


def test_a_lock_folder_someone_else_could_write_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shared = tmp_path / "locks"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("KILN_LOCK_DIR", str(shared))
    make_wheel(tmp_path / "dist")
    run = kiln("index", tmp_path / "dist", tmp_path / "site")
    assert run.code == 2, run.stderr
    assert "not a private folder" in run.stderr
    assert not (tmp_path / "site").exists()
