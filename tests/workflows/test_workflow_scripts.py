"""Every repository script a workflow (or cibuildwheel) calls exists, accepts the arguments it is
given there, and runs in this test suite."""

from __future__ import annotations

import argparse
import re
import shlex

import pytest

from kiln_tool import cli
from workflows.workflow_files import REPO, run_scripts

# `scripts/kiln ...` (this tree's kiln) or `kiln ...` (the installed console script, in kiln.yml).
KILN_CALL = re.compile(r"(?:^|(?<=[\s;&|(\"/]))(?:scripts/)?kiln\s+((?:-C\s+\S+\s+)?[a-z][^\n;&|<>)]*)", re.M)
REPO_SCRIPT = re.compile(r"(?<![\w./-])((?:scripts|tools)/[\w./-]+\.(?:py|cjs|sh))\b")
MAKE_CALL = re.compile(r"(?<![\w-])make\s+([\w-]+)")

# What runs each script in the suite (the workflow's own command line, or the function behind it).
RUN_BY = {
    "scripts/kiln matrix": "tests/matrix/test_matrix_cli.py",
    "scripts/kiln repair": "tests/workflows/test_release_pipeline.py",
    "scripts/kiln audit": "tests/workflows/test_release_pipeline.py",
    "scripts/kiln index": "tests/workflows/test_release_pipeline.py",
    "scripts/kiln torch-abi": "tests/workflows/test_release_pipeline.py",
    "scripts/kiln release": "tests/workflows/test_release_pipeline.py",
    "scripts/kiln sdist": "tests/adopters/test_sdist.py",
    "scripts/kiln torch-runtime": "tests/containers/test_torch_runtime.py",
    "scripts/kiln cibuildwheel": "tests/workflows/test_reusable_workflow.py",
    "scripts/kiln verify": "tests/signing/test_attacks.py",
    "tools/fetch_published_site.py": "tests/workflows/test_release_pipeline.py",
    "tools/verify_published.py": "tests/index/test_verify_published.py",
    "tools/actionlint/lint.cjs": "tests/workflows/test_workflow_lint.py",
    "tools/kiln_release_check.py": "tests/workflows/test_kiln_release.py",
    "make kiln-wheel": "tests/kiln/test_distribution.py",
    "make test": ".ci/run",  # make test is how the suite itself is run
}


def _calls() -> list[tuple[str, str, list[str]]]:
    """(where, script, arguments) for every repository script called."""
    calls = []
    for where, text in run_scripts():
        for match in KILN_CALL.finditer(text):
            before = text[:match.start()].rsplit("\n", 1)[-1].rstrip()
            bare = not match.group(0).startswith("scripts/")
            if bare and before and not before.endswith(("(", ";", "&", "|", "do", "then")):
                continue  # the word kiln in a message, not a command
            words = shlex.split(match.group(1).replace("\\\n", " "))
            while words and words[0] == "-C":  # kiln's global option: the project's folder
                words = words[2:]
            calls.append((where, f"scripts/kiln {words[0]}", words[1:]))
        for match in REPO_SCRIPT.finditer(text):
            if match.group(1) != "scripts/kiln":
                calls.append((where, match.group(1), []))
        for match in MAKE_CALL.finditer(text):
            calls.append((where, f"make {match.group(1)}", []))
    return calls


CALLS = _calls()


def test_the_workflows_call_kiln() -> None:
    called = {script for _, script, _ in CALLS}
    assert {"scripts/kiln matrix", "scripts/kiln repair", "scripts/kiln audit", "scripts/kiln release"} <= called


@pytest.mark.parametrize(("where", "script", "arguments"), CALLS, ids=[f"{w}|{s}" for w, s, _ in CALLS])
def test_every_called_script_runs_in_the_suite(where: str, script: str, arguments: list[str]) -> None:
    assert script in RUN_BY, f"{where} calls {script}, which no test runs: add a test and list it in RUN_BY"
    runner = REPO / RUN_BY[script]
    assert runner.is_file(), f"{RUN_BY[script]} is gone"
    if not script.startswith("make "):
        path = script.split()[0]
        assert (REPO / path).is_file(), f"{where} calls {path}, which does not exist"
        assert (script.split()[-1] if script.startswith("scripts/kiln") else path) in runner.read_text()


def _placeholder(word: str) -> str | None:
    """A shell or cibuildwheel placeholder as a plain argument; None for an array expansion (no words)."""
    if re.fullmatch(r"\$\{\w+\[@\]\}", word):
        return None
    if "$" in word or re.search(r"\{\w+\}", word):
        return "PLACEHOLDER"
    return word


@pytest.mark.parametrize(
    ("where", "script", "arguments"),
    [c for c in CALLS if c[1].startswith("scripts/kiln ")],
    ids=[f"{w}|{s}" for w, s, _ in CALLS if s.startswith("scripts/kiln ")],
)
def test_kiln_accepts_the_arguments_the_workflows_pass(where: str, script: str, arguments: list[str]) -> None:
    command = script.split()[1]
    assert command in cli.COMMANDS, f"{where}: kiln has no command {command!r}"
    words = [w for w in map(_placeholder, arguments) if w is not None]
    parser = cli.build_parser(command)
    # A placeholder given to an option with choices (--mode "$mode") stands for one of them.
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    choices = {o: a.choices for a in sub._actions if a.choices for o in a.option_strings}
    words = [next(iter(choices[words[i - 1]])) if w == "PLACEHOLDER" and i and words[i - 1] in choices else w
             for i, w in enumerate(words)]
    try:
        args = parser.parse_args([command, *words])
    except SystemExit as exc:
        pytest.fail(f"{where}: `kiln {command} {' '.join(arguments)}` does not parse (exit {exc.code})")
    assert args.command == command
