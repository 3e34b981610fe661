"""Running kiln in-process (fast, for generated cases) or as a subprocess, and checking the promises
every run keeps: no traceback, an exit code in {0, 1, 2}, nothing changed outside the output folder,
and a refused run leaves the site byte for byte as it was."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from kiln_tool.cli import main

REPO = Path(__file__).resolve().parents[2]
KILN = REPO / "scripts" / "kiln"


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str


def kiln(*args: str | Path) -> Run:
    """``kiln_tool.cli.main`` in this process, its output captured; an escaping exception fails the test."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in args])
        except SystemExit as exc:  # argparse usage errors
            code = int(exc.code) if isinstance(exc.code, int) else 2
    return Run(code, out.getvalue(), err.getvalue())


def kiln_subprocess(*args: str | Path, timeout: float = 300) -> Run:
    result = subprocess.run([sys.executable, str(KILN), *map(str, args)], capture_output=True, text=True,
                            timeout=timeout)
    return Run(result.returncode, result.stdout, result.stderr)


def tree(root: Path) -> dict[str, str]:
    """Every entry under root: files by sha256, links by target, folders by name (for 'unchanged' checks)."""
    found: dict[str, str] = {}
    if not root.exists():
        return found
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(directory, name)
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                found[rel] = f"link:{os.readlink(path)}"
            elif path.is_dir():
                found[rel] = "dir"
            else:
                found[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def outside(root: Path, out: Path) -> dict[str, str]:
    """tree(root) without what lies in the output folder (its staging siblings are gone after a run)."""
    prefix = out.relative_to(root).as_posix()
    return {k: v for k, v in tree(root).items() if k != prefix and not k.startswith(prefix + "/")}


def assert_kept_promises(run: Run, root: Path, out: Path, before_outside: dict[str, str],
                         before_site: dict[str, str]) -> None:
    assert "Traceback" not in run.stderr + run.stdout, run.stderr
    # The CLI's last-resort guard must not be what caught it: every failure class has its own message.
    assert "cannot use this input" not in run.stderr, run.stderr
    assert run.code in (0, 1, 2), (run.code, run.stderr)
    assert outside(root, out) == before_outside, "a run changed something outside its output folder"
    if run.code != 0:
        assert tree(out) == before_site, "a refused run changed the site"
        assert run.stderr.strip(), "a refusal must say why"
