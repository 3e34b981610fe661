"""The workflow files, parsed, and the shell their steps run (shared by tests/workflows)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import yaml

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
WORKFLOW_DIR = REPO / ".github" / "workflows"
WORKFLOWS = sorted(WORKFLOW_DIR.glob("*.yml"))
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    # YAML 1.1 reads the bare key `on` as the boolean True.
    if True in data:
        data["on"] = data.pop(True)
    return data


def workflow(name: str) -> dict[str, Any]:
    return load(WORKFLOW_DIR / name)


def steps() -> list[tuple[str, str, dict[str, Any]]]:
    """(workflow file, job id, step) for every step of every workflow."""
    found = []
    for path in WORKFLOWS:
        for job_id, job in load(path)["jobs"].items():
            for step in job.get("steps", []):
                found.append((path.name, job_id, step))
    return found


def run_scripts() -> list[tuple[str, str]]:
    """(where, shell text) of every `run:` step and every cibuildwheel command of pyproject.toml."""
    scripts = [(f"{wf}:{job}:{step.get('name', step['run'].splitlines()[0])}", step["run"])
               for wf, job, step in steps() if "run" in step]
    cibw = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["cibuildwheel"]
    for key in ("before-build", "repair-wheel-command", "before-test", "test-command"):
        value = cibw.get(key, [])
        for command in [value] if isinstance(value, str) else value:
            scripts.append((f"pyproject.toml:tool.cibuildwheel.{key}", command))
    return scripts


def substitute(value: str, context: dict[str, dict[str, str]]) -> str:
    """Evaluate the plain `${{ scope.key }}` references of ``value``; any other expression becomes ''."""

    def one(match: re.Match[str]) -> str:
        scope, _, key = match.group(1).partition(".")
        if scope in context and re.fullmatch(r"[\w-]+", key):
            return context[scope][key]  # KeyError: the workflow names a key the context lacks
        return ""

    return EXPRESSION.sub(one, value)
