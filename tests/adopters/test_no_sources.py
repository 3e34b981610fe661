"""A kiln build ships no sources unless the table asks for them (issue 42, item 8).

Many op libraries keep their kernels inside the package folder (mmcv/ops/csrc, torchvision/csrc), and
scikit-build-core's `wheel.packages` copies that whole folder into the wheel: the .cpp, .cu and headers went
out with every wheel. Here ringops is laid out that way (ringops/csrc/); `kiln wheels` leaves every C, C++ and
CUDA source and header out, keeps the project's own wheel.exclude, and `ship-sources = true` puts them back.
The clone shares the session ringops clone's build venvs (a link), so the cost is two incremental builds
(~40 s each at load 8).
"""

from __future__ import annotations

import os
import subprocess
import zipfile
from pathlib import Path

import pytest

from adopters.adopting import COMMIT_DATE, Built, KilnTool, clone_project, timed

pytestmark = pytest.mark.slow

SOURCES = {"ringops/csrc/ringops.cpp", "ringops/csrc/ring_shift_cuda.cu", "ringops/csrc/ring_shift.h"}


@pytest.fixture(scope="module")
def inside_clone(ringops_cpu: Built, ringops_clone: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ringops with its sources in the package folder, its own wheel.exclude (*.txt), committed."""
    ringops_cpu.wheel("pt213cpu")  # the session's build made the build venv this clone links to
    root = clone_project("ringops", tmp_path_factory.mktemp("sources-inside"))
    (root / "csrc").rename(root / "ringops" / "csrc")
    (root / "ringops" / "NOTES.txt").write_text("kept out by the project's own wheel.exclude\n")
    cmake = (root / "CMakeLists.txt").read_text().replace("csrc/", "ringops/csrc/")
    (root / "CMakeLists.txt").write_text(cmake)
    pyproject = (root / "pyproject.toml").read_text()
    (root / "pyproject.toml").write_text(pyproject.replace('wheel.packages = ["ringops"]\n',
                                                          'wheel.packages = ["ringops"]\nwheel.exclude = ["*.txt"]\n'))
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

    pyproject = inside_clone / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('install-samples = ', 'ship-sources = true\ninstall-samples = '))
    members = _members(kiln_tool, inside_clone, tmp_path / "shipped", "ringops, ship-sources: kiln wheels")
    assert members >= SOURCES, sorted(members)
    assert "ringops/NOTES.txt" not in members
