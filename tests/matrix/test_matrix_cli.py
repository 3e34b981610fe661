"""`scripts/kiln matrix` as CI and maintainers run it (exit 0 ok, 2 unusable input)."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from kiln_tool import matrix_data
from kiln_tool.cli import main

REPO = Path(__file__).resolve().parents[2]
KILN = REPO / "scripts" / "kiln"


def kiln_matrix(*args: str) -> subprocess.CompletedProcess[str]:
    """`scripts/kiln matrix ARGS`, in process (the CLI's main, as the script calls it)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["matrix", *args])
    return subprocess.CompletedProcess(["kiln", "matrix", *args], code, out.getvalue(), err.getvalue())


def test_github_matrix_is_one_line_of_json_with_an_include_list() -> None:
    result = kiln_matrix("--github")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("\n") == 1, "GITHUB_OUTPUT takes key=value on one line"
    include = json.loads(result.stdout)["include"]
    jobs = matrix_data.build_jobs(matrix_data.load())
    assert [e["name"] for e in include] == [j.name for j in jobs]
    assert {"name", "runner", "build", "image", "torch", "torch_index", "variant", "mode"} <= set(include[0])


def test_stable_mode_and_filters() -> None:
    result = kiln_matrix("--github", "--mode", "stable", "--platform", "aarch64")
    assert result.returncode == 0, result.stderr
    include = json.loads(result.stdout)["include"]
    assert include and all(e["mode"] == "stable" and e["platform"] == "aarch64" for e in include)
    assert all(e["build"] == "cp310-manylinux_aarch64" for e in include)
    one = json.loads(kiln_matrix("--github", "--job", "torch2.14-cu130-x86_64", "--python", "3.11").stdout)
    assert [(e["name"], e["build"]) for e in one["include"]] == [("torch2.14-cu130-x86_64", "cp311-manylinux_x86_64")]


def test_table_lists_every_job_and_the_totals() -> None:
    result = kiln_matrix()
    assert result.returncode == 0, result.stderr
    jobs = matrix_data.build_jobs(matrix_data.load())
    for job in jobs:
        assert job.name in result.stdout
    wheels = sum(len(j.pythons) for j in jobs)
    assert f"{len(jobs)} jobs, {wheels} wheels (torch mode)" in result.stdout
    stable = kiln_matrix("--mode", "stable")
    assert "cp310-abi3" in stable.stdout and "works with torch" in stable.stdout


def test_counts_print_both_modes() -> None:
    result = kiln_matrix("--counts")
    assert result.returncode == 0, result.stderr
    counts = matrix_data.build_counts(matrix_data.load())
    rows = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines()[2:]}
    for mode in ("torch", "stable"):
        assert rows[mode][:2] == [str(counts[mode]["jobs"]), str(counts[mode]["wheels"])]


def test_local_subset() -> None:
    result = kiln_matrix("--local")
    assert result.returncode == 0, result.stderr
    for spec in matrix_data.local_builds():
        assert spec.name in result.stdout


def test_docker_args_one_per_line_for_mapfile() -> None:
    result = kiln_matrix("--docker-args", "cu126", "x86_64")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0::2] == ["--build-arg"] * 3
    assert "CUDA_VERSION=12.6" in lines


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--platform", "riscv64"), "unknown platform 'riscv64'"),
        (("--job", "torch9.9-*"), "no build job matches"),
        (("--docker-args", "cu999", "x86_64"), "built for no torch"),
    ],
)
def test_bad_selection_is_exit_2_with_a_message(args: tuple[str, ...], message: str) -> None:
    result = kiln_matrix(*args)
    assert result.returncode == 2
    assert message in result.stderr
    assert result.stdout == ""


def test_broken_matrix_file_is_exit_2_naming_the_problem(tmp_path: Path) -> None:
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{not json")
    result = kiln_matrix("--file", str(bad_json))
    assert result.returncode == 2 and "not valid JSON" in result.stderr
    data = json.loads((REPO / "src" / "kiln_tool" / "data" / "matrix.json").read_text())
    del data["cuda_archs"]["13.0"]
    inconsistent = tmp_path / "inconsistent.json"
    inconsistent.write_text(json.dumps(data))
    result = kiln_matrix("--counts", "--file", str(inconsistent))
    assert result.returncode == 2 and "cuda_archs['13.0']" in result.stderr
    missing = kiln_matrix("--file", str(tmp_path / "absent.json"))
    assert missing.returncode == 2 and "cannot read" in missing.stderr


def test_the_script_runs_without_torch() -> None:
    """CI's matrix job has no torch: scripts/kiln matrix must not import it."""
    code = (
        "import runpy, sys; sys.modules['torch'] = None; sys.argv = [sys.argv[1], 'matrix', '--counts'];"
        "runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    result = subprocess.run([sys.executable, "-c", code, str(KILN)], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert "stable" in result.stdout
