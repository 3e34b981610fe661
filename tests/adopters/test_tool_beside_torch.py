"""kiln installed into a maintainer's usual venv, which already holds a torch (issue 42, item 4).

`pip install torch-kiln` goes into the venv the maintainer works in, beside its torch. Every build kiln drives
must still see only its build venv's torch: the project is configured, labelled, pinned and described (build
info) from the combination's torch, never from the one beside kiln. The tool venv here holds torch 2.14.1 (the
cu130 build venv's, linked into its site-packages: the real package, not a copy); the CPU combination builds
against torch 2.13.0. Both kinds of build: kiln's CMake build (ringops) and a setup.py backend (twinlibs), in
the session's clones, whose build venvs the shared fixtures made. Cost, measured at load 10 on 2 cores: one
more tool venv (108 s; 25 s when quiet) and two rebuilds with warm build venvs (ringops 53 s, twinlibs 157 s).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from adopters.adopting import REPO, Built, KilnTool, build_info, install_tool, timed, wheel_metadata

pytestmark = pytest.mark.slow

OTHER_TORCH_SITE = REPO / ".venvs" / "torch2.14-cu130-py3.11" / "lib" / "python3.11" / "site-packages"


@pytest.fixture(scope="module")
def tool_beside_torch(tmp_path_factory: pytest.TempPathFactory) -> KilnTool:
    from support.kiln_dist import kiln_wheel

    if not (OTHER_TORCH_SITE / "torch" / "version.py").is_file():
        pytest.skip(f"{OTHER_TORCH_SITE} holds no torch: scripts/kiln venv --build cu130")
    with timed("tool beside torch 2.14.1: python -m venv + pip install torch_kiln-*.whl"):
        tool = install_tool(kiln_wheel(), tmp_path_factory.mktemp("kiln-tool-beside-torch"))
    (site,) = (tool.venv / "lib").glob("python3.*/site-packages")
    for name in ("torch", "torchgen", "torch-2.14.1.dist-info"):
        (site / name).symlink_to(OTHER_TORCH_SITE / name, target_is_directory=True)
    return tool


def _wheels_from(tool: KilnTool, clone: Path, dist: Path, timing: str) -> Path:
    with timed(timing):
        proc = tool.run("-C", clone, "wheels", "--dist", dist)
    shown = f"$ kiln -C {clone} wheels --dist {dist} (exit {proc.returncode})\n{(proc.stdout + proc.stderr)[-6000:]}"
    assert proc.returncode == 0, shown
    wheels = sorted(dist.glob("*.whl"))
    assert len(wheels) == 1, shown
    return wheels[0]


def _assert_built_for_torch_213(wheel: Path, project: str, version: str) -> None:
    assert wheel.name.startswith(f"{project}-{version}+pt213cpu-cp311-"), wheel.name
    metadata = wheel_metadata(wheel)
    assert metadata["Version"] == [f"{version}+pt213cpu"], metadata
    (torch,) = [r for r in map(Requirement, metadata.get("Requires-Dist", [])) if r.name == "torch"]
    assert torch.specifier == SpecifierSet(">=2.13,<2.14"), metadata.get("Requires-Dist")
    info = build_info(wheel, project)
    assert (info["torch_version"], info["torch_major_minor"]) == ("2.13.0+cpu", "2.13"), info


def test_kilns_cmake_build_sees_only_the_build_venvs_torch(tool_beside_torch: KilnTool, ringops_cpu: Built,
                                                           ringops_clone: Path, tmp_path: Path) -> None:
    ringops_cpu.wheel("pt213cpu")  # the session's build (by the tool without torch) made the clone's build venv
    wheel = _wheels_from(tool_beside_torch, ringops_clone, tmp_path / "dist",
                         "ringops: kiln wheels by the tool beside torch 2.14.1")
    _assert_built_for_torch_213(wheel, "ringops", "0.3.0")


def test_a_backend_build_sees_only_the_build_venvs_torch(tool_beside_torch: KilnTool, twinlibs_cpu: Built,
                                                         twinlibs_clone: Path, tmp_path: Path) -> None:
    twinlibs_cpu.wheel("pt213cpu")
    wheel = _wheels_from(tool_beside_torch, twinlibs_clone, tmp_path / "dist",
                         "twinlibs: kiln wheels by the tool beside torch 2.14.1")
    _assert_built_for_torch_213(wheel, "twinlibs", "0.2.0")
