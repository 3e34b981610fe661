"""The tool an adopter installs: torch-kiln's wheel in a fresh venv is the whole of kiln, and nothing of opkiln."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from adopters.adopting import REPO, KilnTool, adopter_env, config_line_counts

pytestmark = pytest.mark.slow


def _python(tool: KilnTool, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(tool.venv / "bin" / "python"), "-c", code], cwd=tool.workdir,
                          env=adopter_env(tool.venv / "bin"), capture_output=True, text=True, check=False)


def test_kiln_runs_from_the_venv_and_its_cmake_package_is_inside_it(kiln_tool: KilnTool) -> None:
    version = kiln_tool.run("--version")
    assert version.returncode == 0 and "torch-kiln" in version.stdout, version.stdout + version.stderr
    cmake_dir = kiln_tool.run("--cmake-dir")
    assert cmake_dir.returncode == 0, cmake_dir.stderr
    folder = Path(cmake_dir.stdout.strip())
    assert folder.is_relative_to(kiln_tool.venv), folder
    assert (folder / "KilnConfig.cmake").is_file() and (folder / "KilnConfigVersion.cmake").is_file()


def test_the_venv_holds_nothing_of_opkiln(kiln_tool: KilnTool) -> None:
    where = _python(kiln_tool, "import kiln_tool, sys; print(kiln_tool.__file__); print(sys.path)")
    assert where.returncode == 0, where.stderr
    module, path = where.stdout.splitlines()[:2]
    assert Path(module).is_relative_to(kiln_tool.venv), module
    assert str(REPO) not in path, path
    opkiln = _python(kiln_tool, "import opkiln")
    assert opkiln.returncode != 0 and "No module named 'opkiln'" in opkiln.stderr, opkiln.stderr
    listed = subprocess.run([str(kiln_tool.venv / "bin" / "python"), "-m", "pip", "list", "--format=freeze"],
                            capture_output=True, text=True, check=True).stdout.lower()
    names = {line.split("==")[0] for line in listed.splitlines()}
    assert "torch-kiln" in names and "opkiln" not in names and "torch" not in names, names


def test_the_fixture_projects_fit_the_issues_limits() -> None:
    """At most 20 lines of [tool.kiln], and of CMake for kiln's build (issue 32's "Done when")."""
    counts = config_line_counts()
    assert set(counts) == {"ringops [tool.kiln]", "ringops CMakeLists.txt", "twinlibs [tool.kiln]",
                           "segops [tool.kiln]"}, counts
    assert all(count <= 20 for count in counts.values()), counts
