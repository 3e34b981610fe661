"""Issue 43, class 5: in the reusable workflow (kiln.yml) no value from a tag, a branch or an input reaches an
interpreter (a jq program, bash arithmetic, eval, a Python program's text). The index job's release step is run
as written by bash, with a stand-in `gh` that evaluates its --jq programs with the real jq (NOT GitHub's CLI) and a
stand-in `kiln` that records its arguments, under tags that `git check-ref-format` accepts."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workflows.workflow_files import steps

GH = """#!/bin/bash
# stand-in gh: pages URL, and `release list --json tagName --jq PROG` evaluated by the real jq over two releases
if [[ "$1" == api ]]; then echo https://owner.github.io/repo; exit 0; fi
prog=""; while [[ $# -gt 0 ]]; do if [[ "$1" == --jq ]]; then prog="$2"; fi; shift; done
echo '[{"tagName":"v0.1.0"},{"tagName":"v0.2.0"}]' | jq -r "$prog"
"""
KILN = """#!/bin/bash
printf '%s\\0' "$@" > "$KILN_ARGS"
"""


def _index_release_step() -> str:
    (script,) = [s.get("run", "") for wf, job, s in steps() if wf == "kiln.yml" and job == "index"
                 and 'kiln -C "$PROJECT_DIR" release' in s.get("run", "")]
    return str(script)


def _valid_ref(tag: str) -> bool:
    if shutil.which("git") is None:
        pytest.skip("no git")
    return subprocess.run(["git", "check-ref-format", f"refs/tags/{tag}"], capture_output=True,
                          check=False).returncode == 0


def _run(tag: str, tmp: Path, gh: str = GH) -> tuple[subprocess.CompletedProcess[str], list[str] | None]:
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in (("gh", gh), ("kiln", KILN)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    args_file = tmp / "kiln-args"
    args_file.unlink(missing_ok=True)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "TAG": tag, "GITHUB_REPOSITORY": "owner/repo",
           "PROJECT_DIR": ".", "STORAGE": "data/storage.json", "RUNNER_TEMP": str(tmp), "KILN_ARGS": str(args_file),
           "HOME": str(tmp)}
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", _index_release_step()], cwd=tmp, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    args = args_file.read_text().split("\0")[:-1] if args_file.exists() else None
    return proc, args


HOSTILE_TAGS = [
    'v1"]|length',                                     # closes the old jq string: a jq syntax the tag wrote
    'x")|env.GH_TOKEN|("',                              # jq reading the environment the tag chose
    'v1$(touch${IFS}canary)',                          # a shell substitution, if anything evaluates it
    'v1`touch${IFS}canary`',
    "v1'$(touch${IFS}canary)'",
    "v0.2.0",                                          # a real earlier tag: counted, not a first release
]


@pytest.mark.parametrize("tag", HOSTILE_TAGS)
def test_a_tag_reaches_no_interpreter(tag: str, tmp_path: Path) -> None:
    assert _valid_ref(tag), f"{tag!r} must be a tag git accepts for the case to mean anything"
    proc, args = _run(tag, tmp_path)
    assert not (tmp_path / "canary").exists()
    if args is None:  # refused by the step's own check, with its message
        assert proc.returncode == 1 and "::error::the tag is not a release tag" in proc.stdout, proc.stderr
        return
    assert proc.returncode == 0, proc.stderr
    at = args.index("--tag")
    assert args[at + 1] == tag, "the tag reaches kiln as one argument, exactly"
    first = "--first-release" in args
    assert not first, "two other releases exist: never a first release"


def test_only_the_first_release_starts_from_an_empty_site(tmp_path: Path) -> None:
    proc, args = _run("v0.1.0", tmp_path)  # the stand-in lists v0.1.0 and v0.2.0: one other release
    assert proc.returncode == 0 and args is not None and "--first-release" not in args
    proc, args = _run("v0.1.0", tmp_path, GH.replace('{"tagName":"v0.2.0"}', '{"tagName":"v0.1.0"}'))
    assert proc.returncode == 0 and args is not None and "--first-release" in args, proc.stderr


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(alphabet=st.sampled_from(list("v0.1-_+/\"'$(){}|`;&!<>=,%#@")), min_size=1, max_size=24))
def test_any_valid_tag_is_an_argument_or_refused(tmp_path: Path, tag: str) -> None:
    if not _valid_ref(tag):
        return
    proc, args = _run(tag, tmp_path)
    assert not (tmp_path / "canary").exists()
    assert (args is not None and args[args.index("--tag") + 1] == tag) or "::error::the tag" in proc.stdout, \
        proc.stdout + proc.stderr


def test_no_run_script_builds_a_program_from_a_value() -> None:
    """Read statically over every run: step of kiln.yml: a jq program, a python -c program and bash arithmetic
    hold constants only (values are passed as arguments or through the environment)."""
    for _wf, job, step in (s for s in steps() if s[0] == "kiln.yml"):
        script = str(step.get("run", ""))
        for program in re.findall(r"--jq\s+(\"[^\"]*\"|'[^']*'|\S+)", script):
            assert "$" not in program.strip("'") or program.startswith("'"), (job, program)
        for program in re.findall(r"python\"?\s+-c\s+(\"[^\"]*\")", script):
            assert "$" not in program, (job, program)
        assert not re.search(r"\$\(\(|\blet\b|\beval\b", script), (job, script)
        for line in script.splitlines():
            if re.search(r"\[\[[^]]*-(eq|ne|lt|le|gt|ge)\b", line):
                # arithmetic only over counts that wc/find printed, never a value from outside
                assert re.search(r'"\$(count|expected)"', line), (job, line)
