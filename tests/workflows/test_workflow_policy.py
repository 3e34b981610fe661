"""Supply-chain and publication rules the workflows must keep."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from workflows.workflow_files import REPO, WORKFLOWS, load, steps, workflow

PINNED = re.compile(r"^[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}$")
WRITE_ALLOWED = {
    # (workflow, job): the scopes it may write, and why
    # kiln release uploads the wheels as the tag's release assets, and signs the release manifest keyless
    ("kiln.yml", "index"): {"contents", "id-token"},
    ("kiln.yml", "attest"): {"id-token", "attestations"},  # build provenance of those assets
    ("kiln.yml", "deploy"): {"pages", "id-token"},  # GitHub Pages deployment
    # The caller grants the reusable workflow what its release jobs above need, no more.
    ("release.yml", "release"): {"contents", "pages", "id-token", "attestations"},
    # torch-kiln's own release: provenance of the tool's wheel, then PyPI's trusted publishing (OIDC only)
    ("release-kiln.yml", "attest"): {"id-token", "attestations"},
    ("release-kiln.yml", "publish"): {"id-token"},
}


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_actions_are_pinned_by_commit_sha_with_the_version_in_a_comment(path: Any) -> None:
    lines = path.read_text().splitlines()
    for number, line in enumerate(lines, 1):
        match = re.match(r"^\s*(?:-\s+)?uses:\s*(\S+)(.*)$", line)
        if not match:
            continue
        ref, rest = match.groups()
        if ref.startswith("./"):
            assert (REPO / ref).is_file(), f"{path.name}:{number}: {ref} is not a workflow of this repository"
            continue  # a workflow of this repository
        assert PINNED.match(ref), f"{path.name}:{number}: {ref} is not pinned to a commit SHA"
        assert re.match(r"^\s+# v\d+\.\d+\.\d+$", rest), f"{path.name}:{number}: say which release {ref} is"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_least_privilege_and_concurrency(path: Any) -> None:
    wf = load(path)
    top = wf.get("permissions")
    assert top is not None, f"{path.name}: no top-level permissions (the default token may write)"
    assert top == {} or top == {"contents": "read"}, f"{path.name}: top-level permissions {top}"
    assert "concurrency" in wf and "group" in wf["concurrency"]
    for job_id, job in wf["jobs"].items():
        perms = job.get("permissions", {})
        assert isinstance(perms, dict), f"{path.name}:{job_id}: permissions must be listed scope by scope"
        writes = {scope for scope, level in perms.items() if level == "write"}
        allowed = WRITE_ALLOWED.get((path.name, job_id), set())
        assert writes <= allowed, f"{path.name}:{job_id} writes {writes - allowed}"
        if "uses" not in job:
            assert "timeout-minutes" in job, f"{path.name}:{job_id} has no timeout"
    assert "pull_request_target" not in wf["on"]


def test_checkouts_do_not_keep_the_token() -> None:
    for wf, job, step in steps():
        if str(step.get("uses", "")).startswith("actions/checkout@"):
            assert step.get("with", {}).get("persist-credentials") is False, f"{wf}:{job}"


def test_triggers() -> None:
    assert set(workflow("ci.yml")["on"]) == {"push", "pull_request"}
    wheels = workflow("wheels.yml")["on"]
    assert {"workflow_call", "workflow_dispatch"} <= set(wheels)
    assert set(wheels["workflow_call"]["inputs"]) <= set(wheels["workflow_dispatch"]["inputs"])
    # kiln.yml is only ever called: by opkiln's workflows and by every repository adopting kiln.
    assert set(workflow("kiln.yml")["on"]) == {"workflow_call"}
    release = workflow("release.yml")["on"]
    assert set(release) == {"push"} and set(release["push"]) == {"tags"}
    # The full verification of the published index runs on its own schedule, never on untrusted input.
    assert set(workflow("verify-index.yml")["on"]) == {"schedule", "workflow_dispatch"}


def _job_steps_text(wf: dict[str, Any], job: str) -> list[str]:
    return [str(step.get("run") or step.get("uses")) for step in wf["jobs"][job]["steps"]]


def test_wheels_builds_one_job_per_matrix_entry_with_ccache_and_artifacts() -> None:
    wf = workflow("kiln.yml")
    build = wf["jobs"]["build"]
    assert build["strategy"]["matrix"] == "${{ fromJSON(needs.matrix.outputs.include) }}"
    assert build["runs-on"] == "${{ matrix.runner }}"
    assert build["strategy"]["fail-fast"] is False
    texts = _job_steps_text(wf, "build")
    cache = next(s for s in build["steps"] if str(s.get("uses", "")).startswith("actions/cache@"))
    assert cache["with"]["path"] == ".ccache" and "${{ matrix.name }}" in cache["with"]["key"]
    assert build["env"]["CCACHE_DIR"].endswith("/.ccache")
    upload = next(s for s in build["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact@"))
    assert upload["with"]["name"] == "wheels-${{ matrix.name }}"
    assert upload["with"]["if-no-files-found"] == "error"
    order = [i for i, t in enumerate(texts) if "docker build" in t or "cibuildwheel --platform" in t]
    assert len(order) == 2 and "docker build" in texts[order[0]], "the image is built before cibuildwheel uses it"


def test_release_merges_onto_the_published_site_and_never_replaces_a_wheel() -> None:
    wf = workflow("kiln.yml")
    index = _job_steps_text(wf, "index")
    # One step runs the one release path (kiln release: torch ABIs, release audit, fetch, merge).
    (step,) = [i for i, t in enumerate(index) if 'kiln -C "$PROJECT_DIR" release' in t]
    pages = next(i for i, t in enumerate(index) if t.startswith("actions/upload-pages-artifact@"))
    assert step < pages
    assert "--first-release" in index[step] and 'if [[ "$earlier" == "0" ]]' in index[step], \
        "only the first release may start from an empty site"
    assert "--base-url" in index[step]
    assert not any(" index " in t or "kiln audit" in t or "fetch_published_site" in t
                   for t in index), "the index job runs kiln release, not its steps one by one"
    # The wheels' storage is the tag's release assets (data/storage.json), written only by kiln release: upload,
    # read back by digest, then listed. No step uploads an asset behind its back, none with --clobber.
    assert json.loads((REPO / "data" / "storage.json").read_text())["backend"] == "github-release"
    assert 'storage=(--storage "$STORAGE" --repository "$GITHUB_REPOSITORY" --tag "$TAG")' in index[step]
    assert '--base-url "$pages_url" "${storage[@]}"' in index[step]
    release = _job_steps_text(wf, "attest")
    assert any(t.startswith("actions/attest-build-provenance@") for t in release)
    assert not any("gh release upload" in t or "gh release create" in t for t in index + release)
    assert all("--clobber" not in t for t in index + release)
    assert wf["jobs"]["deploy"]["needs"] == ["index", "attest"]
    assert wf["jobs"]["index"]["needs"] == ["build", "sdist"]
    assert all(wf["jobs"][j]["if"] == "inputs.release" for j in ("index", "attest", "deploy"))
    # opkiln's release is a call of it, as an adopter's is: both modes, its storage, the permissions granted.
    caller = workflow("release.yml")
    assert set(caller["jobs"]) == {"release"}
    call = caller["jobs"]["release"]
    assert call["uses"] == "./.github/workflows/kiln.yml"
    assert call["with"]["release"] is True and call["with"]["modes"].split() == ["torch", "stable"]
    assert call["with"]["storage"] == "data/storage.json"
    assert caller["concurrency"]["cancel-in-progress"] is False


def test_ci_compiles_cuda_through_the_wheels_workflow() -> None:
    ci = workflow("ci.yml")
    assert {"lint", "typecheck", "test-cpu", "cuda-compile"} <= set(ci["jobs"])
    cuda = ci["jobs"]["cuda-compile"]
    assert cuda["uses"] == "./.github/workflows/wheels.yml"
    assert cuda["with"]["jobs"].startswith("torch") and "cu13" in cuda["with"]["jobs"]
