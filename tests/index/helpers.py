"""Helpers of the `kiln index` tests (imported as index.helpers; tests/ is on pythonpath)."""

from __future__ import annotations

import hashlib
import http.server
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
KILN = REPO / "scripts" / "kiln"


def kiln_index(*args: str | Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`scripts/kiln index ...` exactly as a maintainer runs it."""
    return subprocess.run([sys.executable, str(KILN), "index", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def kiln_index_in_process(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """`kiln index ...` through ``kiln_tool.cli.main`` in this process, as :func:`kiln_index` reports it.

    The same code as the command (tests/trust/test_properties.py runs generated cases both ways and
    compares), without a new interpreter per case, and where mutation testing sees which tests reach which
    function (it cannot follow a subprocess)."""
    from trust.kiln_runs import kiln

    run = kiln("index", *args)
    return subprocess.CompletedProcess(["kiln", "index", *map(str, args)], run.code, run.stdout, run.stderr)


def tree(root: Path) -> dict[str, str]:
    """Every file under root (relative path -> sha256), for 'nothing changed' assertions."""
    if not root.exists():
        return {}
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def leftovers(parent: Path) -> list[str]:
    """Temporary or old copies of a site that a run left beside its output."""
    return sorted(p.name for p in parent.iterdir() if ".tmp-" in p.name or ".old-" in p.name)


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    requests: list[str]

    def log_message(self, format: str, *args: object) -> None:
        self.requests.append(self.path)


@dataclass
class Server:
    root: Path
    url: str
    requests: list[str] = field(default_factory=list)


