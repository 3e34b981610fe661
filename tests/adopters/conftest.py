"""Projects that are not opkiln, adopting kiln as their maintainers would (issue 32, item 6).

Nothing here runs kiln from this checkout. The tool's wheel (tests/support/kiln_dist.py: `make kiln-wheel`'s
dist/kiln/torch_kiln-*.whl) is pip-installed into a fresh venv that holds nothing else of opkiln; each fixture
project of tests/adopters/projects/ is copied into a temporary folder and committed there (a fresh clone
stand-in: its SOURCE_DATE_EPOCH and commit are its own); then that venv's `kiln -C <project> ...` builds it
the way README.md's "Adopting kiln in your op library" tells a maintainer to.

The builds are shared: one `kiln wheels` per project and variant per session (the fixtures are in
tests/adopters/fixtures.py, imported by tests/conftest.py for the whole suite). How long each step took, and
the line counts of each project's `[tool.kiln]` and CMakeLists.txt, are printed at the end of the run and
written to tests/_artifacts/adopters/timings.json.
"""

from __future__ import annotations

import json
import os

import pytest

from adopters.adopting import ARTIFACTS, TIMINGS, config_line_counts


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not TIMINGS:
        return
    report = {"seconds": TIMINGS, "lines": config_line_counts(), "load_1min": os.getloadavg()[0],
              "cpus": os.cpu_count()}
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "timings.json").write_text(json.dumps(report, indent=1) + "\n")
    terminalreporter.write_sep("-", "adopters: seconds per step (tests/_artifacts/adopters/timings.json)")
    for name, seconds in TIMINGS.items():
        terminalreporter.write_line(f"{seconds:8.1f} s  {name}")
    for name, count in report["lines"].items():
        terminalreporter.write_line(f"{count:8d} lines  {name}")
