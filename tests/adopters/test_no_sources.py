"""A kiln build ships no sources unless the table asks for them (issue 42, item 8).

Many op libraries keep their kernels inside the package folder (mmcv/ops/csrc, torchvision/csrc), and
scikit-build-core's `wheel.packages` copies that whole folder into the wheel: the .cpp, .cu and headers went
out with every wheel. Here ringops is laid out that way (ringops/csrc/); every C, C++ and CUDA source and header
stays out, the project's own wheel.exclude holds, and `ship-sources = true` puts them back, both for `kiln wheels`
and for the adopter's own `pip wheel --no-build-isolation .` (kiln's metadata provider, which ringops names, adds the
patterns to the build's own settings: kiln_tool.wheel_settings; before, only kiln wheels passed the exclusion and a
plain build shipped ringops/csrc/). The kiln wheels clone links the session ringops
clone's build venvs, the plain builds share the session's maintainer venv and one build folder: two incremental
builds (~40 s each at load 8) and two plain ones (31 s + 10 s at load 7).
"""

from __future__ import annotations

import os
import subprocess
import zipfile
from pathlib import Path

import pytest

from adopters.adopting import COMMIT_DATE, Built, KilnTool, adopter_env, clone_project, timed

pytestmark = pytest.mark.slow

SOURCES = {"ringops/csrc/ringops.cpp", "ringops/csrc/ring_shift_cuda.cu", "ringops/csrc/ring_shift.h"}


def _sources_inside(parent: Path) -> Path:
    """ringops with its sources in the package folder and its own wheel.exclude (*.txt)."""
    root = clone_project("ringops", parent)
    (root / "csrc").rename(root / "ringops" / "csrc")
    (root / "ringops" / "NOTES.txt").write_text("kept out by the project's own wheel.exclude\n")
    cmake = (root / "CMakeLists.txt").read_text().replace("csrc/", "ringops/csrc/")
    (root / "CMakeLists.txt").write_text(cmake)
    pyproject = (root / "pyproject.toml").read_text()
    (root / "pyproject.toml").write_text(pyproject.replace('wheel.packages = ["ringops"]\n',
                                                          'wheel.packages = ["ringops"]\nwheel.exclude = ["*.txt"]\n'))
    return root


def _ship_sources(root: Path) -> None:
    pyproject = root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('install-samples = ', 'ship-sources = true\ninstall-samples = '))


@pytest.fixture(scope="module")
def inside_clone(ringops_cpu: Built, ringops_clone: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """_sources_inside, committed, sharing the session ringops clone's build venvs."""
    ringops_cpu.wheel("pt213cpu")  # the session's build made the build venv this clone links to
    root = _sources_inside(tmp_path_factory.mktemp("sources-inside"))
    (root / ".venvs").symlink_to(ringops_clone / ".venvs", target_is_directory=True)
    env = {**os.environ, "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@example.org", "GIT_COMMITTER_NAME": "a",
           "GIT_COMMITTER_EMAIL": "a@example.org", "GIT_AUTHOR_DATE": COMMIT_DATE, "GIT_COMMITTER_DATE": COMMIT_DATE}
    (root / ".gitignore").write_text(".venvs\n")
    for args in (["add", "--all"], ["commit", "--quiet", "--no-gpg-sign", "-m", "sources in the package"]):
        subprocess.run(["git", "-C", str(root), *args], check=True, env=env, capture_output=True)
    return root


def _members(tool: KilnTool, root: Path, dist: Path, timing: str) -> set[str]:
    with timed(timing):
        proc = tool.run("-C", root, "wheels", "--dist", dist)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    (wheel,) = dist.glob("ringops-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        return set(zf.namelist())


def test_the_wheel_leaves_the_sources_out_unless_the_table_ships_them(kiln_tool: KilnTool, inside_clone: Path,
                                                                      tmp_path: Path) -> None:
    members = _members(kiln_tool, inside_clone, tmp_path / "default", "ringops, sources inside: kiln wheels")
    assert "ringops/__init__.py" in members and "ringops/_build_info.json" in members
    assert any(m.startswith("ringops/_C.") for m in members), sorted(members)
    shipped = sorted(m for m in members if m.rsplit(".", 1)[-1] in {"c", "cc", "cpp", "cxx", "cu", "h", "hpp", "cuh"})
    assert shipped == [], shipped
    assert "ringops/NOTES.txt" not in members, "the project's own wheel.exclude still holds"

    _ship_sources(inside_clone)
    members = _members(kiln_tool, inside_clone, tmp_path / "shipped", "ringops, ship-sources: kiln wheels")
    assert members >= SOURCES, sorted(members)
    assert "ringops/NOTES.txt" not in members


def _pip_wheel(python: Path, root: Path, dist: Path, timing: str) -> set[str]:
    """The adopter's own `pip wheel --no-build-isolation .` in its venv: nothing of kiln's command line, only the
    torch-kiln installed there (its entry points: the CMake package and the metadata provider)."""
    with timed(timing):
        proc = subprocess.run([str(python), "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w", str(dist),
                               "-C", "build-dir=build/plain", "."], cwd=root, env=adopter_env(python.parent),
                              capture_output=True, text=True, timeout=1800, check=False)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    (wheel,) = dist.glob("ringops-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        return set(zf.namelist())


def test_a_plain_pip_wheel_leaves_the_sources_out_unless_the_table_ships_them(maintainer_python: Path,
                                                                            tmp_path: Path) -> None:
    """Before: scikit-build-core copied ringops/csrc/ whole (kiln wheels alone passed the exclusion). The second
    build reuses the first's build folder (-C build-dir), so it compiles nothing."""
    root = _sources_inside(tmp_path / "src")
    members = _pip_wheel(maintainer_python, root, tmp_path / "default", "ringops, sources inside: plain pip wheel")
    assert any(m.startswith("ringops/_C.") for m in members) and "ringops/_build_info.json" in members
    shipped = sorted(m for m in members if m.rsplit(".", 1)[-1] in {"c", "cc", "cpp", "cxx", "cu", "h", "hpp", "cuh"})
    assert shipped == [], shipped
    assert "ringops/NOTES.txt" not in members, "the project's own wheel.exclude still holds"

    _ship_sources(root)
    members = _pip_wheel(maintainer_python, root, tmp_path / "shipped", "ringops, ship-sources: plain pip wheel")
    assert members >= SOURCES, sorted(members)
    assert "ringops/NOTES.txt" not in members
