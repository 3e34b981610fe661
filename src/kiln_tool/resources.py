"""Where kiln's own files are: the data it reads, its CMake package, the requirement pins it installs.

The data ships inside the package (src/kiln_tool/data). The CMake package and the images' recipes live
at the top of the checkout (cmake/, docker/: the project's design card), and the torch-kiln wheel
carries them inside the package (kiln_tool/cmake, kiln_tool/docker; packaging/kiln/pyproject.toml), as
pybind11 ships its CMake files. So each is found beside this module in an installed wheel, else at the
checkout's top when kiln runs from a checkout (scripts/kiln). Nothing of the project kiln builds is
found here: that is kiln_tool.project's. Standard library only (CMake and the launcher's bootstrap
import it).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["DISTRIBUTION", "ENTRY_POINTS", "cmake_dir", "data_dir", "data_path", "docker_dir", "package_dir",
           "requirements_path"]

DISTRIBUTION = "torch-kiln"
ENTRY_POINTS: dict[str, dict[str, str]] = {
    "console_scripts": {"kiln": "kiln_tool.cli:main"},
    "cmake.prefix": {"Kiln": "kiln_tool"},
    "dynamic_metadata.provider": {"kiln": "kiln_tool.build_metadata"},
}
"""The entry points of the torch-kiln distribution (packaging/kiln/pyproject.toml declares the same; a test
holds them equal): what a build that has kiln on its path without the installed wheel is offered too."""

_PACKAGE_DIR = Path(__file__).resolve().parent


def package_dir() -> Path:
    """The kiln_tool package folder (what `import kiln_tool` loads)."""
    return _PACKAGE_DIR


def data_dir() -> Path:
    """kiln's data: the matrix, audit policies, torch ABI records, container recipes, schemas."""
    return _PACKAGE_DIR / "data"


def data_path(*parts: str) -> Path:
    """A file or folder under data_dir(), e.g. data_path("audit_policy", "common.json")."""
    return data_dir().joinpath(*parts)


def _shipped(name: str) -> Path:
    """A folder the wheel carries inside the package (kiln_tool/NAME) and a checkout holds at its top (NAME)."""
    inside = _PACKAGE_DIR / name
    if inside.is_dir():
        return inside
    return _PACKAGE_DIR.parent.parent / name


def cmake_dir() -> Path:
    """kiln's CMake package (KilnConfig.cmake): what `find_package(Kiln CONFIG)` needs as Kiln_DIR."""
    return _shipped("cmake")


def docker_dir() -> Path:
    """The images' recipes (Dockerfile, layout-cuda-root.sh): the build context of kiln's images."""
    return _shipped("docker")


def requirements_path(name: str) -> Path:
    """A requirement file kiln installs from at run time (data/requirements/NAME: build.lock, uv.txt, pip.txt)."""
    return data_path("requirements", name)
