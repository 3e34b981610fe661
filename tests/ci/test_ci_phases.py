"""scripts/ci/phases.py: `make test`'s two lanes report every phase, prefixed, with its exit status, and the
phase table CI is judged by comes from those rows."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from support.scripts import load_script

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "ci" / "phases.py"
phases = load_script(SCRIPT, "ci_phases")


def _run(log: Path, *command: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), "run", "--log", str(log), "lane-a", "step", "--", *command],
                          capture_output=True, text=True, env=env, timeout=60)


def test_a_phase_prefixes_its_lines_keeps_its_exit_status_and_is_logged(tmp_path: Path) -> None:
    log = tmp_path / "phases.jsonl"
    ok = _run(log, sys.executable, "-c", "print('one'); print('two')")
    failed = _run(log, sys.executable, "-c", "import sys; print('bad', file=sys.stderr); sys.exit(3)")
    assert ok.returncode == 0 and failed.returncode == 3
    assert "[lane-a] one\n[lane-a] two\n" in ok.stdout
    assert "[lane-a] bad\n" in failed.stdout  # stderr too, in order with stdout
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["lane"], r["phase"], r["rc"]) for r in rows] == [("lane-a", "step", 0), ("lane-a", "step", 3)]
    table = subprocess.run([sys.executable, str(SCRIPT), "table", str(log)], capture_output=True, text=True,
                           check=True).stdout
    assert "| lane-a | step |" in table and "| all | (wall, both lanes) |" in table


def test_a_dry_run_logs_nothing_and_the_lane_make_gets_no_jobserver(tmp_path: Path) -> None:
    log = tmp_path / "phases.jsonl"
    env = {"PATH": "/usr/bin:/bin", "MAKEFLAGS": "kn -j2 --jobserver-auth=fifo:/tmp/x -- V=1"}
    proc = _run(log, sys.executable, "-c", "import os; print(os.environ['MAKEFLAGS'])", env=env)
    assert proc.returncode == 0 and not log.exists()
    assert "[lane-a] kn -- V=1\n" in proc.stdout


def test_no_command_and_a_missing_log_are_refused(tmp_path: Path) -> None:
    assert _run(tmp_path / "log").returncode == 2
    missing = subprocess.run([sys.executable, str(SCRIPT), "table", str(tmp_path / "none")], capture_output=True,
                             text=True)
    assert missing.returncode == 2 and "no such file" in missing.stderr


@settings(max_examples=50, deadline=None)
@given(st.lists(st.sampled_from(["-j2", "--jobserver-auth=3,4", "-jN", "-k", "--", "V=1", "-Otarget"]), max_size=6),
       st.sampled_from(["", "n", "kn", "k", "ns"]))
def test_make_flags_drop_only_the_jobserver_and_see_dry_runs(words: list[str], first: str) -> None:
    flags = " ".join(([first] if first else []) + words)
    kept, dry_run = phases._make_flags(flags)
    assert not any(w.startswith(("-j", "--jobserver")) for w in kept.split())
    assert dry_run == ("n" in first)
    assert [w for w in kept.split()] == [w for w in flags.split() if not w.startswith(("-j", "--jobserver"))]
