"""cibuildwheel, under the environment each build job of kiln.yml (the reusable workflow wheels.yml and release.yml
call) gets, selects exactly the matrix's identifiers."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

from kiln_tool import matrix_data
from workflows.workflow_files import EXPRESSION, REPO, substitute, workflow

CIBUILDWHEEL = Path(sys.executable).parent / "cibuildwheel"


def _job_environments() -> list[tuple[str, dict[str, str], tuple[str, ...]]]:
    env_template: dict[str, str] = workflow("kiln.yml")["jobs"]["build"]["env"]
    matrix = matrix_data.load()
    cases = []
    for mode in matrix_data.MODES:
        for entry in matrix_data.github_matrix(matrix, matrix_data.build_jobs(matrix, mode))["include"]:
            context = {"matrix": entry, "github": {"workspace": "/work"}, "inputs": {"project-dir": "."}}
            env = {key: substitute(str(value), context) for key, value in env_template.items()}
            cases.append((entry["name"], env, tuple(entry["build"].split())))
    return cases


def _identifiers(env: dict[str, str]) -> tuple[int, str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("CIBW_")}
    proc = subprocess.run([str(CIBUILDWHEEL), "--print-build-identifiers", "--platform", "linux"],
                          capture_output=True, text=True, cwd=REPO, env={**base, **env})
    return proc.returncode, proc.stdout, proc.stderr


def _identifiers_in_process(env: dict[str, str]) -> tuple[int, str, str]:
    """cibuildwheel's own entry point, in this process (a subprocess per job costs ~0.7 s)."""
    from cibuildwheel.__main__ import main

    base = {k: v for k, v in os.environ.items() if not k.startswith("CIBW_")}
    out, err = io.StringIO(), io.StringIO()
    argv = ["cibuildwheel", "--print-build-identifiers", "--platform", "linux"]
    with mock.patch.dict(os.environ, {**base, **env}, clear=True), mock.patch.object(sys, "argv", argv), \
            contextlib.chdir(REPO), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def test_every_job_environment_selects_exactly_its_identifiers() -> None:
    cases = _job_environments()
    assert len(cases) == sum(len(matrix_data.build_jobs(matrix_data.load(), m)) for m in matrix_data.MODES)
    for name, env, expected in cases:
        code, out, err = _identifiers_in_process(env)
        assert code == 0, f"{name}: cibuildwheel failed:\n{err}"
        assert tuple(out.split()) == expected, f"{name}: cibuildwheel selects {out.split()}, matrix: {expected}"


def test_cibw_variables_in_workflows_are_per_job_only() -> None:
    """Shared cibuildwheel settings live in pyproject.toml; a workflow sets CIBW_* only from the job's values."""
    for name in ("kiln.yml", "wheels.yml", "ci.yml", "release.yml"):
        wf = workflow(name)
        scopes = [wf.get("env", {})] + [job.get("env", {}) for job in wf["jobs"].values()]
        scopes += [step.get("env", {}) for job in wf["jobs"].values() for step in job.get("steps", [])]
        for env in scopes:
            for key, value in env.items():
                if key.startswith("CIBW_"):
                    assert EXPRESSION.search(str(value)), f"{name}: {key}={value!r} is constant: pyproject.toml"


def test_the_shared_selection_excludes_musllinux_and_free_threading() -> None:
    """Without per-job narrowing, pyproject.toml alone selects the supported CPython manylinux builds.

    Also runs the real `cibuildwheel` executable once, as the workflow does.
    """
    code, out, err = _identifiers({"CIBW_ARCHS": "x86_64"})
    assert code == 0, err
    pythons = matrix_data.load().python
    assert out.split() == [f"cp{p.replace('.', '')}-manylinux_x86_64" for p in pythons]


@pytest.mark.parametrize("mode", matrix_data.MODES)
def test_matrix_env_references_exist_in_every_entry(mode: str) -> None:
    """A `${{ matrix.X }}` that the matrix lacks would silently be empty on GitHub."""
    build = workflow("kiln.yml")["jobs"]["build"]
    text = repr(build)
    referenced = {m.group(1).split(".", 1)[1] for m in EXPRESSION.finditer(text) if m.group(1).startswith("matrix.")}
    matrix = matrix_data.load()
    for entry in matrix_data.github_matrix(matrix, matrix_data.build_jobs(matrix, mode))["include"]:
        assert referenced <= set(entry), f"{entry['name']} lacks {referenced - set(entry)}"
