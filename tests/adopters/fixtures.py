"""The adopters' session fixtures (tests/adopters/conftest.py says how they are built), shared by the whole suite:
tests/conftest.py imports them, so tests/adopters, tests/guard and the rest build each fixture project once per
session."""

from __future__ import annotations

from pathlib import Path

import pytest

from adopters.adopting import Built, KilnTool, clone_project, install_tool, kiln_wheels, timed


@pytest.fixture(scope="session")
def kiln_tool(tmp_path_factory: pytest.TempPathFactory) -> KilnTool:
    from support.kiln_dist import kiln_wheel  # builds dist/kiln/ (make kiln-wheel) when it holds no wheel

    with timed("tool: the torch-kiln wheel (dist/kiln/, built if missing)"):
        wheel = kiln_wheel()
    with timed("tool: python -m venv + pip install torch_kiln-*.whl"):
        return install_tool(wheel, tmp_path_factory.mktemp("kiln-tool"))


@pytest.fixture(scope="session")
def ringops_clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return clone_project("ringops", tmp_path_factory.mktemp("adopter"))


@pytest.fixture(scope="session")
def twinlibs_clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return clone_project("twinlibs", tmp_path_factory.mktemp("adopter"))


@pytest.fixture(scope="session")
def ringops_cpu(kiln_tool: KilnTool, ringops_clone: Path) -> Built:
    return kiln_wheels(kiln_tool, ringops_clone, timing="ringops: kiln wheels (cpu)")


@pytest.fixture(scope="session")
def ringops_cu130(kiln_tool: KilnTool, ringops_clone: Path) -> Built:
    return kiln_wheels(kiln_tool, ringops_clone, "--variant", "cu130", timing="ringops: kiln wheels --variant cu130")


@pytest.fixture(scope="session")
def twinlibs_cpu(kiln_tool: KilnTool, twinlibs_clone: Path) -> Built:
    return kiln_wheels(kiln_tool, twinlibs_clone, timing="twinlibs: kiln wheels (cpu)")


@pytest.fixture(scope="session")
def segops_clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return clone_project("segops", tmp_path_factory.mktemp("adopter"))


@pytest.fixture(scope="session")
def segops_cpu(kiln_tool: KilnTool, segops_clone: Path) -> Built:
    return kiln_wheels(kiln_tool, segops_clone, timing="segops: kiln wheels (cpu)")


@pytest.fixture(scope="session")
def maintainer_python(kiln_tool: KilnTool, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A maintainer's own venv as README's daily loop has them make it: torch 2.13.0 (CPU), the build tools of both
    kinds of build (setuptools; scikit-build-core, cmake) with ninja, and the torch-kiln wheel; its python. Shared
    by kiln develop's tests and the plain `pip wheel --no-build-isolation` of test_no_sources."""
    from support.venvs import make_venv

    with timed("maintainer venv: torch 2.13.0, setuptools, scikit-build-core, cmake, ninja, torch-kiln"):
        return make_venv(tmp_path_factory.mktemp("maintainer") / "venv", "2.13.0",
                         extra=["setuptools>=69", "scikit-build-core>=1.1.2", "cmake>=3.26", "ninja",
                                str(kiln_tool.wheel)])
