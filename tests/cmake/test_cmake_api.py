"""kiln's public CMake API on a project that is not opkiln (tests/cmake/tinyops, docs/cmake-api.md).

One real configure, build and install of tinyops against the CPU torch of the build venv: a library
loaded with torch.ops.load_library (the table's default kind) and a Python extension module, each one
op. The asserts read the installed .so files (pyelftools) and load them; bad calls of the API stop the
configure step with one message.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from elftools.elf.constants import P_FLAGS
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

REPO = Path(__file__).resolve().parents[2]
KILN_CMAKE_DIR = REPO / "cmake"
PROJECT = Path(__file__).parent / "tinyops"
TORCH_VENV = REPO / ".venvs" / "torch2.13-cpu-py3.11"
TORCH_PYTHON = TORCH_VENV / "bin" / "python"

pytestmark = pytest.mark.slow

DF_TEXTREL = 0x4
DF_BIND_NOW = 0x8


def _cmake() -> Path:
    """A CMake >= 3.26 (the dev venv's, else the build venv's): the system one is too old for C++20 CUDA."""
    for candidate in (Path(sys.executable).parent / "cmake", TORCH_VENV / "bin" / "cmake"):
        if candidate.exists():
            return candidate
    pytest.skip("no CMake >= 3.26 in the dev venv or the build venv (make setup)")


def _env(cmake: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KILN_", "CMAKE_"))}
    env["PATH"] = f"{cmake.parent}{os.pathsep}{env.get('PATH', '')}"  # ninja beside cmake
    return env


def _configure(source: Path, build: Path) -> subprocess.CompletedProcess[str]:
    cmake = _cmake()
    return subprocess.run(
        [str(cmake), "-S", str(source), "-B", str(build), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
         f"-DPython_EXECUTABLE={TORCH_PYTHON}", f"-DKiln_DIR={KILN_CMAKE_DIR}"],
        capture_output=True, text=True, env=_env(cmake), timeout=300)


@dataclass(frozen=True)
class Built:
    source: Path
    package: Path

    @property
    def load_library(self) -> Path:
        return self.package / "_tiny_add.so"

    @property
    def python_module(self) -> Path:
        (module,) = self.package.glob("_tiny_mod.*.so")
        return module


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    if not TORCH_PYTHON.exists():
        pytest.skip(f"{TORCH_VENV} is missing: scripts/kiln venv --build cpu (or make setup)")
    root = tmp_path_factory.mktemp("cmake-api")
    source = root / "tinyops"
    shutil.copytree(PROJECT, source)
    build, site = root / "build", root / "site"
    cmake = _cmake()
    configured = _configure(source, build)
    assert configured.returncode == 0, configured.stdout + configured.stderr
    for args in (["--build", str(build)], ["--install", str(build), "--prefix", str(site)]):
        step = subprocess.run([str(cmake), *args], capture_output=True, text=True, env=_env(cmake), timeout=600)
        assert step.returncode == 0, step.stdout + step.stderr
    return Built(source=source, package=site / "tinyops")


def _exported(path: Path) -> set[str]:
    with path.open("rb") as fh:
        dynsym = ELFFile(fh).get_section_by_name(".dynsym")
        assert isinstance(dynsym, SymbolTableSection)
        return {s.name for s in dynsym.iter_symbols()
                if s.name and s["st_shndx"] != "SHN_UNDEF" and s["st_info"]["bind"] in ("STB_GLOBAL", "STB_WEAK")}


def _dynamic(path: Path) -> dict[str, list[Any]]:
    tags: dict[str, list[Any]] = {}
    with path.open("rb") as fh:
        for section in ELFFile(fh).iter_sections():
            if isinstance(section, DynamicSection):
                for tag in section.iter_tags():
                    value = getattr(tag, tag.entry.d_tag[3:].lower(), tag.entry.d_val)
                    tags.setdefault(tag.entry.d_tag, []).append(value)
    return tags


def _segments(path: Path) -> dict[str, int]:
    with path.open("rb") as fh:
        return {seg["p_type"]: seg["p_flags"] for seg in ELFFile(fh).iter_segments()}


def test_nothing_is_exported_but_the_module_init(built: Built) -> None:
    assert _exported(built.load_library) == set()
    assert _exported(built.python_module) == {"PyInit__tiny_mod"}


@pytest.mark.parametrize("library", ["load_library", "python_module"])
def test_runpath_is_origin_relative_only(built: Built, library: str) -> None:
    tags = _dynamic(getattr(built, library))
    assert "DT_RPATH" not in tags
    assert tags["DT_RUNPATH"] == ["$ORIGIN:$ORIGIN/../torch/lib"]


@pytest.mark.parametrize("library", ["load_library", "python_module"])
def test_no_text_relocations_no_executable_stack_and_relro_now(built: Built, library: str) -> None:
    path = getattr(built, library)
    tags = _dynamic(path)
    assert "DT_TEXTREL" not in tags
    flags = int(tags.get("DT_FLAGS", [0])[0])
    assert not flags & DF_TEXTREL
    assert flags & DF_BIND_NOW
    segments = _segments(path)
    assert not segments["PT_GNU_STACK"] & P_FLAGS.PF_X
    assert "PT_GNU_RELRO" in segments


def test_links_only_the_torch_it_uses(built: Built) -> None:
    needed = _dynamic(built.load_library)["DT_NEEDED"]
    assert {"libtorch_cpu.so", "libc10.so"} <= set(needed)
    assert not [lib for lib in needed if "cuda" in lib or "python" in lib]


def test_the_projects_tree_is_mapped_to_its_package(built: Built) -> None:
    """__FILE__ (TORCH_CHECK) names tinyops/csrc/..., never where the project or the torch lies."""
    data = built.load_library.read_bytes()
    assert b"tinyops/csrc/tiny_add.cpp" in data
    assert str(built.source).encode() not in data
    assert str(TORCH_VENV).encode() not in data


def test_one_build_info_for_the_package_with_every_librarys_ops(built: Built) -> None:
    info = json.loads((built.package / "_build_info.json").read_text())
    assert info["ops"] == ["tinyops::tiny_add", "tinyops::tiny_mul"]
    assert (info["project"], info["package"], info["namespace"]) == ("tinyops", "tinyops", "tinyops")
    assert info["libraries"] == "load-library"
    assert info["version"] == "0.1.0+pt213cpu"
    assert {p.name for p in built.package.iterdir()} == {"_build_info.json", "_kiln", built.load_library.name,
                                                         built.python_module.name}
    assert info["targets"] == ["tinyops/_tiny_add=load-library", "tinyops/_tiny_mod=python-module"]


def test_both_libraries_load_and_run(built: Built) -> None:
    script = (
        "import sys, torch\n"
        f"sys.path.insert(0, {str(built.package)!r})\n"
        "import _tiny_mod\n"
        f"torch.ops.load_library({str(built.load_library)!r})\n"
        "a = torch.arange(3.0)\n"
        "print(torch.ops.tinyops.tiny_add(a, a).tolist(), torch.ops.tinyops.tiny_mul(a, a).tolist())\n"
    )
    run = subprocess.run([str(TORCH_PYTHON), "-c", script], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("\n")[0] == "[0.0, 2.0, 4.0] [0.0, 1.0, 4.0]"


@pytest.mark.parametrize(("call", "message"), [
    ("kiln_add_torch_library(_tiny_add SOURCES csrc/tiny_add.cpp RUNPATH /usr/lib)",
     "RUNPATH entry '/usr/lib' is not $ORIGIN-relative"),
    ("kiln_add_torch_library(_tiny_add LOAD_LIBRARY PYTHON_MODULE SOURCES csrc/tiny_add.cpp)",
     "PYTHON_MODULE and LOAD_LIBRARY exclude each other"),
    ("kiln_add_torch_library(_tiny_add SOURCES csrc/tiny_add.cpp DESTINATION ../outside)",
     "DESTINATION '../outside' is not a folder inside the wheel"),
])
def test_a_wrong_call_stops_the_configure_step_with_one_message(tmp_path: Path, call: str, message: str) -> None:
    if not TORCH_PYTHON.exists():
        pytest.skip(f"{TORCH_VENV} is missing: scripts/kiln venv --build cpu (or make setup)")
    source = tmp_path / "tinyops"
    shutil.copytree(PROJECT, source)
    lines = (source / "CMakeLists.txt").read_text().splitlines()
    kept = [line for line in lines if not line.startswith("kiln_add_torch_library")]
    (source / "CMakeLists.txt").write_text("\n".join([*kept, call, ""]))
    configured = _configure(source, tmp_path / "build")
    assert configured.returncode != 0
    assert configured.stderr.count("CMake Error") == 1, configured.stderr
    assert message in " ".join(configured.stderr.split()), configured.stderr


@pytest.mark.skipif(shutil.which("ccache") is None, reason="ccache is needed (make setup installs it)")
@pytest.mark.parametrize("build_folder", ["inside", "outside"])
def test_paths_stay_mapped_through_ccache_with_a_base_dir(tmp_path: Path, build_folder: str) -> None:
    """kiln wheels compiles through ccache with CCACHE_BASEDIR = the project's folder, which also holds the build
    folder and the build venvs (.venvs/): ccache then hands the compiler every path below it relative to the
    build folder (../../csrc, ../../.venvs/.../torch/include). Outside: scikit-build-core's default build folder
    is a temporary one elsewhere, and the manylinux image's CCACHE_BASEDIR (/project) holds both, so the project
    is ../../../tinyops to the compiler. Every spelling is mapped: no __FILE__ names where the build happened,
    only tinyops/ and torch/."""
    if not TORCH_PYTHON.exists():
        pytest.skip(f"{TORCH_VENV} is missing: scripts/kiln venv --build cpu (or make setup)")
    # The layout kiln wheels builds in: the project, its build folder and its torch under one base dir
    # (REPO/build/ is ignored by git; the build venv is reached through a link inside the project).
    base = REPO / "build" / "test-ccache-base" / tmp_path.name
    shutil.rmtree(base, ignore_errors=True)
    source = base / "tinyops"
    shutil.copytree(PROJECT, source)
    (source / ".venvs").mkdir()
    (source / ".venvs" / "torch").symlink_to(TORCH_VENV, target_is_directory=True)
    build = source / "build" / "cpu" if build_folder == "inside" else base / "tmp" / "scikit-build" / "build"
    site = base / "site"
    cmake = _cmake()
    basedir = source if build_folder == "inside" else base
    env = {**_env(cmake), "CCACHE_BASEDIR": str(basedir), "CCACHE_NOHASHDIR": "1", "CCACHE_RECACHE": "1"}
    try:
        steps = [[str(cmake), "-S", str(source), "-B", str(build), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                  f"-DPython_EXECUTABLE={source / '.venvs' / 'torch' / 'bin' / 'python'}",
                  f"-DKiln_DIR={KILN_CMAKE_DIR}", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"],
                 [str(cmake), "--build", str(build)], [str(cmake), "--install", str(build), "--prefix", str(site)]]
        for args in steps:
            step = subprocess.run(args, capture_output=True, text=True, env=env, timeout=600, cwd=source)
            assert step.returncode == 0, step.stdout + step.stderr
        data = (site / "tinyops" / "_tiny_add.so").read_bytes()
        assert b"tinyops/csrc/tiny_add.cpp" in data
        strings = [s for s in data.split(b"\0") if b".h" in s or b".cpp" in s]
        leaked = [s for s in strings if b"../" in s or b".venvs" in s or str(base).encode() in s]
        assert leaked == [], leaked[:5]
    finally:
        shutil.rmtree(base, ignore_errors=True)


OTHER_TORCH_SITE = REPO / ".venvs" / "torch2.14-cu130-py3.11" / "lib" / "python3.11" / "site-packages"


def test_the_build_sees_only_its_venvs_torch_whatever_the_tools_venv_holds(tmp_path: Path) -> None:
    """kiln installed into a venv that also holds torch (a maintainer's usual venv): its CMake package, found in
    that site-packages, must configure the project from the build venv's torch (Python_EXECUTABLE's, 2.13 CPU),
    never from the torch beside kiln_tool (2.14.1 here), whose site-packages is no build's PYTHONPATH."""
    if not TORCH_PYTHON.exists() or not (OTHER_TORCH_SITE / "torch" / "version.py").is_file():
        pytest.skip("needs the build venvs of torch 2.13 CPU and 2.14.1 cu130 (scripts/kiln venv --build local)")
    site = tmp_path / "tool-venv" / "site-packages"  # as pip lays torch-kiln out beside a torch
    shutil.copytree(REPO / "src" / "kiln_tool", site / "kiln_tool", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(KILN_CMAKE_DIR, site / "kiln_tool" / "cmake")
    for name in ("torch", "torchgen", "torch-2.14.1.dist-info"):
        (site / name).symlink_to(OTHER_TORCH_SITE / name, target_is_directory=True)
    source = tmp_path / "tinyops"
    shutil.copytree(PROJECT, source)
    cmake = _cmake()
    configured = subprocess.run(
        [str(cmake), "-S", str(source), "-B", str(tmp_path / "build"), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
         f"-DPython_EXECUTABLE={TORCH_PYTHON}", f"-DKiln_DIR={site / 'kiln_tool' / 'cmake'}"],
        capture_output=True, text=True, env=_env(cmake), timeout=300)
    assert configured.returncode == 0, configured.stdout + configured.stderr
    config = (tmp_path / "build" / "kiln_config.cmake").read_text()
    values = dict(line[len("set("):-1].split(" ", 1) for line in config.splitlines() if line.startswith("set("))
    assert values["KILN_TORCH_VERSION"].strip('"') == "2.13.0+cpu", config
    assert Path(values["KILN_TORCH_ROOT"].strip('"')).is_relative_to(TORCH_VENV.resolve()), config
    assert values["KILN_WHEEL_VERSION"].strip('"').endswith("+pt213cpu"), config
    cache = (tmp_path / "build" / "CMakeCache.txt").read_text().splitlines()
    assert [line.split("=", 1)[1] for line in cache if line.startswith("Kiln_DIR:")] == [
        str(site / "kiln_tool" / "cmake")], "the CMake package used is the one in the tool's venv"


CUDA_VENV = REPO / ".venvs" / "torch2.14-cu130-py3.11"
CUDA_PROJECT = Path(__file__).parent / "streamops"


def test_a_cuda_library_on_torchs_current_stream_compiles() -> None:
    """streamops includes ATen/cuda/CUDAContext.h (for the current stream), as most CUDA op libraries do; that
    header includes cusparse.h and cublas_v2.h, which torch ships in its CUDA library wheels
    (site-packages/nvidia/cu13/include for CUDA 13) and a minimal toolkit lacks. kiln's CMake API finds them
    beside the build venv's torch. Compiled with nvcc for one arch (KILN_CUDA_ARCHS=8.0); no GPU is needed.
    Slow cold: CUDAContext.h is a heavy include (101 s at load 8 on 2 cores, 362 s at load 10, most of it this
    one nvcc compile). It builds in one fixed folder through ccache when there is one, so a rerun is a cache hit
    (14 s); a header that cannot be found still fails, in the preprocessing ccache runs first."""
    python = CUDA_VENV / "bin" / "python"
    if not python.exists():
        pytest.skip(f"{CUDA_VENV} is missing: scripts/kiln venv --build cu130")
    if shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists():
        pytest.skip("no nvcc (CUDA 13.0 toolkit)")
    base = REPO / "build" / "test-cuda-library-headers"  # fixed, so ccache's key is the same each run
    shutil.rmtree(base, ignore_errors=True)
    source, build = base / "streamops", base / "build"
    shutil.copytree(CUDA_PROJECT, source)
    cmake = _cmake()
    env = {**_env(cmake), "KILN_CUDA_ARCHS": "8.0"}
    launchers = [f"-DCMAKE_{lang}_COMPILER_LAUNCHER=ccache" for lang in ("CXX", "CUDA")] if shutil.which("ccache") \
        else []
    try:
        configured = subprocess.run(
            [str(cmake), "-S", str(source), "-B", str(build), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
             f"-DPython_EXECUTABLE={python}", f"-DKiln_DIR={KILN_CMAKE_DIR}", *launchers],
            capture_output=True, text=True, env=env, timeout=300)
        assert configured.returncode == 0, configured.stdout + configured.stderr
        assert "kiln: CUDA library headers beside torch: " in configured.stdout, configured.stdout
        built = subprocess.run([str(cmake), "--build", str(build)], capture_output=True, text=True, env=env,
                               timeout=900)
        assert built.returncode == 0, (built.stdout + built.stderr)[-6000:]
        (module,) = build.glob("_C.*.so")
        with module.open("rb") as fh:
            assert ELFFile(fh).get_section_by_name(".nv_fatbin") is not None, "the CUDA kernel is in the library"
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("layout", [
    # CUDA 13 (cu130): one folder for every library.
    ["cu13"],
    # CUDA 12 (cu126, cu128): a folder per library, as torch's nvidia-*-cu12 runtime wheels install them.
    ["cublas", "cuda_runtime", "cusparse", "cusolver", "nccl"],
])
def test_the_cuda_library_headers_are_found_in_every_layout_of_the_matrix(tmp_path: Path, layout: list[str]) -> None:
    """kiln::cuda_library_headers lists site-packages/nvidia/<component>/include beside torch, whatever the
    components are called, and nothing that is not an include folder."""
    site = tmp_path / "site-packages"
    (site / "torch").mkdir(parents=True)
    for component in layout:
        (site / "nvidia" / component / "include").mkdir(parents=True)
    (site / "nvidia" / "stray" / "lib").mkdir(parents=True)
    (site / "nvidia" / "__init__.py").write_text("")
    project = tmp_path / "probe"
    project.mkdir()
    (project / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.26)\nproject(probe LANGUAGES NONE)\n"
        f'include("{KILN_CMAKE_DIR}/KilnCuda.cmake")\nset(KILN_TORCH_ROOT "{site}/torch")\n'
        "kiln_add_cuda_library_headers()\nkiln_add_cuda_library_headers()\n"  # once, whatever the calls
        "get_target_property(dirs kiln_cuda_library_headers INTERFACE_INCLUDE_DIRECTORIES)\n"
        'message(STATUS "dirs=${dirs}")\n')
    cmake = _cmake()
    run = subprocess.run([str(cmake), "-S", str(project), "-B", str(tmp_path / "build")], capture_output=True,
                         text=True, env=_env(cmake), timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    (line,) = [x for x in run.stdout.splitlines() if "dirs=" in x]
    assert line.split("dirs=", 1)[1].split(";") == [str(site / "nvidia" / c / "include") for c in sorted(layout)]
