"""README.md's commands: its sh blocks hold only the two set-up commands (run by CI on a fresh clone:
.ci/run) and users' pip lines; every `make TARGET` it names is a Makefile target, every `kiln COMMAND`
a kiln command, and the set-up it promises is what the Makefile does."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from kiln_tool.cli import COMMANDS
from support.doc_commands import doc_commands

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"


def _make_targets() -> set[str]:
    text = (REPO / "Makefile").read_text()
    return set(re.findall(r"^([a-z][\w-]*):(?!=)", text, re.M))


def test_the_sh_blocks_are_the_two_commands_and_pip_lines() -> None:
    # Anything else a reader is told to run here needs a test of its own (like docs/stable-abi.md's).
    # The section "Adopting kiln in your op library" has a test of its own: tests/docs/test_adopting_doc.py.
    lines = README.read_text().splitlines()
    start = lines.index("## Adopting kiln in your op library")
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("## "))
    commands = [c for c in doc_commands(README) if not start < c.line <= end]
    assert [c.text for c in commands[:2]] == ["make wheels", "make test"]
    others = [c for c in commands[2:] if not c.text.startswith("pip install opkiln -f https://")]
    assert not others, [f"{c.where}: {c.text}" for c in others]


def test_every_make_target_it_names_exists() -> None:
    named = set(re.findall(r"`make ([a-z][\w-]*)", README.read_text()))
    assert {"wheels", "test", "setup", "suite"} <= named
    assert not named - _make_targets(), f"README.md names missing Makefile targets: {named - _make_targets()}"


def test_every_kiln_command_it_names_exists() -> None:
    named = set(re.findall(r"`kiln ([a-z][\w-]*)", README.read_text()))
    assert {"wheels", "repair", "audit", "venv"} <= named
    assert not named - set(COMMANDS), f"README.md names missing kiln commands: {named - set(COMMANDS)}"


def _dry_run(target: str) -> list[str]:
    out = subprocess.run(["make", "-n", target], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return out.splitlines()


def test_make_wheels_sets_up_the_tool_venv_only_and_make_test_sets_up_everything_first() -> None:
    wheels = _dry_run("wheels")
    assert any("system-deps.sh build" in line for line in wheels)
    venv_lines = [line for line in wheels if "scripts/kiln venv" in line]
    assert venv_lines and all(line.endswith("-r requirements/kiln.txt") for line in venv_lines), venv_lines
    test = _dry_run("test")
    order = [next(i for i, line in enumerate(test) if needle in line)
             for needle in ("scripts/ci/system-deps.sh", "-r requirements/dev.txt", "venv --build local", "pytest")]
    assert order == sorted(order), test
    assert any(line.rstrip().endswith("scripts/ci/system-deps.sh") for line in test)  # every group, not only build
