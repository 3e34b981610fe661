"""Issue 42, item 2, in the reusable workflow: a release publishes the project's one sdist beside the wheels.
kiln.yml's sdist job (once, not per matrix entry; read-only; kiln installed from the hashed lock) runs
`kiln sdist` and uploads it; the index job downloads it and passes `--sdist` for each file to `kiln release`;
attest attests it with the wheels. The steps' scripts run as written by bash, with a stand-in `kiln` that records
its arguments (NOT kiln) and the real folders the artifact steps name. A second or so."""

from __future__ import annotations

import fnmatch
import glob
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workflows.workflow_files import substitute, workflow

KILN = """#!/bin/bash
# stand-in kiln: records its arguments; `sdist --dist DIR` writes DIR/pkg-1.0.tar.gz as kiln sdist would
printf '%s\\0' "$@" > "$KILN_ARGS"
while [[ $# -gt 0 ]]; do
  if [[ "$1" == --dist ]]; then mkdir -p "$2"; echo sdist > "$2/pkg-1.0.tar.gz"; echo "$2/pkg-1.0.tar.gz"; fi
  shift
done
"""
GH = """#!/bin/bash
# stand-in gh: the pages URL, and one earlier release
if [[ "$1" == api ]]; then echo https://owner.github.io/repo; exit 0; fi
echo v0.1.0
"""

FLOW = workflow("kiln.yml")
JOBS: dict[str, Any] = FLOW["jobs"]


def _uses(job: str, action: str) -> list[dict[str, Any]]:
    return [s for s in JOBS[job]["steps"] if s.get("uses", "").startswith(f"actions/{action}@")]


def _run_step(job: str, marker: str) -> str:
    (script,) = [s["run"] for s in JOBS[job]["steps"] if marker in s.get("run", "")]
    return str(script)


def _bash(script: str, tmp: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], list[str] | None]:
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in (("kiln", KILN), ("gh", GH)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    args_file = tmp / "kiln-args"
    args_file.unlink(missing_ok=True)
    full = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp), "RUNNER_TEMP": str(tmp),
            "KILN_ARGS": str(args_file), **env}
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp, env=full, capture_output=True,
                          text=True, timeout=60, check=False)
    return proc, args_file.read_text().split("\0")[:-1] if args_file.exists() else None


def _install_lines(job: str) -> list[str]:
    (script,) = [s["run"] for s in JOBS[job]["steps"] if "--require-hashes" in s.get("run", "")]
    return [line.strip() for line in script.splitlines() if line.strip() and not line.strip().startswith("#")]


def test_the_sdist_job_runs_once_on_the_release_path_read_only_with_the_hashed_kiln() -> None:
    job = JOBS["sdist"]
    assert job["if"] == JOBS["index"]["if"] == "inputs.release"
    assert job["permissions"] == {"contents": "read"}
    assert "strategy" not in job, "one sdist per version, not one per matrix entry"
    # The same install as the matrix job's, line for line: the caller's lock with --require-hashes, then a kiln
    # path with --no-deps --no-build-isolation, and a clear error when the lock is unset or installs no kiln.
    assert _install_lines("sdist") == _install_lines("matrix")
    assert 'python -m pip install --require-hashes -r "$KILN_LOCK"' in _install_lines("sdist")
    install = next(s for s in job["steps"] if "--require-hashes" in s.get("run", ""))
    assert install["env"] == {"KILN": "${{ inputs.kiln }}", "KILN_LOCK": "${{ inputs.kiln-lock }}"}
    (checkout,) = _uses("sdist", "checkout")
    assert checkout["with"]["persist-credentials"] is False


def test_the_uploaded_artifact_is_the_file_kiln_sdist_made(tmp_path: Path) -> None:
    step = next(s for s in JOBS["sdist"]["steps"] if " sdist" in s.get("run", ""))
    assert step["env"] == {"PROJECT_DIR": "${{ inputs.project-dir }}"}
    proc, args = _bash(step["run"], tmp_path, PROJECT_DIR="my project $(touch canary)")
    assert proc.returncode == 0, proc.stderr
    assert args == ["-C", "my project $(touch canary)", "sdist", "--dist", f"{tmp_path}/sdist"]
    assert not (tmp_path / "canary").exists()
    (upload,) = _uses("sdist", "upload-artifact")
    assert upload["with"]["name"] == "sdist" and upload["with"]["if-no-files-found"] == "error"
    uploaded = glob.glob(substitute(upload["with"]["path"], {"runner": {"temp": str(tmp_path)}}))
    assert uploaded == [f"{tmp_path}/sdist/pkg-1.0.tar.gz"]


def _release(tmp: Path, names: list[str]) -> tuple[subprocess.CompletedProcess[str], list[str] | None, Path]:
    """The index job's release step, after its sdist download put ``names`` where that step's `path` says."""
    (download,) = [s for s in _uses("index", "download-artifact") if s["with"].get("name") == "sdist"]
    folder = Path(substitute(download["with"]["path"], {"runner": {"temp": str(tmp)}}))
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_text("sdist")
    proc, args = _bash(_run_step("index", 'kiln -C "$PROJECT_DIR" release'), tmp, TAG="v0.2.0",
                       GITHUB_REPOSITORY="owner/repo", PROJECT_DIR=".", STORAGE="data/storage.json")
    return proc, args, folder


def _sdist_args(args: list[str]) -> list[str]:
    return [args[i + 1] for i, word in enumerate(args) if word == "--sdist"]


def test_the_index_job_needs_the_sdist_and_passes_it_to_kiln_release(tmp_path: Path) -> None:
    assert "sdist" in JOBS["index"]["needs"]
    proc, args, folder = _release(tmp_path, ["pkg-1.0.tar.gz"])
    assert proc.returncode == 0, proc.stderr
    assert args is not None and args[:3] == ["-C", ".", "release"] and args[-1] == "--sign-keyless"
    assert _sdist_args(args) == [str(folder / "pkg-1.0.tar.gz")]


def test_no_sdist_downloaded_no_sdist_option(tmp_path: Path) -> None:
    proc, args, _ = _release(tmp_path, [])
    assert proc.returncode == 0, proc.stderr
    assert args is not None and "--sdist" not in args and args[-1] == "--sign-keyless"


# Any file name, also ones kiln sdist never makes (but no hidden one: the glob skips those, kiln never makes one).
NAMES = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc"), exclude_characters="/"),
                min_size=1, max_size=20).filter(lambda s: not s.startswith(".")).map(lambda s: f"{s}.tar.gz")


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(NAMES | st.sampled_from(["$(touch canary).tar.gz", "a b.tar.gz", "-x.tar.gz", "*.tar.gz"]),
                max_size=3, unique=True))
def test_every_sdist_is_one_argument_never_evaluated(tmp_path: Path, names: list[str]) -> None:
    root = tmp_path / "run"
    subprocess.run(["rm", "-rf", str(root)], check=True)
    root.mkdir()
    proc, args, folder = _release(root, names)
    assert proc.returncode == 0, proc.stderr
    assert args is not None
    assert sorted(_sdist_args(args)) == sorted(str(folder / n) for n in names)
    assert not (root / "canary").exists()


@pytest.mark.parametrize("subject", ["dist/pkg-1.0.tar.gz", "dist/pkg-1.0-cp311-cp311-manylinux_2_28_x86_64.whl"])
def test_attest_attests_the_sdist_with_the_wheels(subject: str) -> None:
    downloads = _uses("attest", "download-artifact")
    assert {d["with"].get("name") for d in downloads} >= {"sdist"}
    assert {d["with"]["path"] for d in downloads} == {"dist"}
    (attest,) = [s for s in JOBS["attest"]["steps"] if s.get("uses", "").startswith("actions/attest-build-provenance@")]
    patterns = attest["with"]["subject-path"].split()
    assert any(fnmatch.fnmatch(subject, p) for p in patterns)


def test_the_sdist_job_has_every_python_a_local_build_may_name() -> None:
    """kiln sdist makes the build venv of the matrix's first local build (find_python: python<X.Y> on PATH)."""
    from kiln_tool.resources import data_path

    matrix = json.loads(Path(data_path("matrix.json")).read_text())
    (setup,) = _uses("sdist", "setup-python")
    versions = setup["with"]["python-version"].split()
    assert set(matrix["python"]) <= set(versions)
    assert {build["python"] for build in matrix["local"]} <= set(versions)
    assert versions[-1] == "3.11", "the default python, which installs and runs kiln, as the matrix job's"
