"""The source fallback (issue 42, item 2): `kiln sdist` makes one unlabelled sdist per version, and a user whose
torch the matrix lacks builds it with `pip install <pkg> --no-binary <pkg> --no-build-isolation`, getting a wheel
pinned and described (build info, guard) for the torch it found. Its version stays the sdist's plain one: pip
discards a build whose version differs from the sdist's file name ("inconsistent version"), so a +pt214cu130
label cannot come from an index-named sdist.

ringops (kiln's CMake build; its matrix builds torch 2.13 CPU locally) is built from its sdist into a user's venv
holding torch 2.14.1 cu130 (the cu130 build venv's, through a .pth: support.venvs.make_venv) and torch-kiln, with
nvcc 13.0 from this machine. Cost: the sdist a few seconds; the install from it (a CUDA compile of one .cu through
nvcc) 29 s at load 1.5, printed by `timed`; the module 56 s with the tool venv. A missing
compiler (CXX unset, CXX naming none) and a CUDA torch without nvcc fail at cmake's configure, before anything
compiles: 1-5 s each.

segops (a setup.py project without a [project] table) gets its sdist from setuptools through kiln sdist, with
kiln_tool.sdist_backend as its build backend; pip builds it against torch 2.14.1 cu130 into a pinned, described,
guarded wheel: one C++ file against torch's headers, 117 s at load 9 (its sdist 42 s with a fresh build venv).
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from adopters.adopting import KilnTool, adopter_env, run_python, timed

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ringops_sdist(kiln_tool: KilnTool, ringops_clone: Path) -> Path:
    """In build/sdist/ by default, never in dist/ (kiln index and kiln release refuse any file there but wheels)."""
    dist = ringops_clone / "build" / "sdist"
    with timed("ringops: kiln sdist"):
        proc = kiln_tool.run("-C", ringops_clone, "sdist")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not list((ringops_clone / "dist").glob("*.tar.gz"))
    made = sorted(p.name for p in dist.iterdir())
    assert made == ["ringops-0.3.0.tar.gz"], made
    assert proc.stdout.strip() == str(dist / "ringops-0.3.0.tar.gz"), proc.stdout
    return dist / made[0]


def _pkg_info(sdist: Path) -> dict[str, list[str]]:
    with tarfile.open(sdist) as tar:
        member = tar.extractfile("ringops-0.3.0/PKG-INFO")
        assert member is not None
        text = member.read().decode()
    headers: dict[str, list[str]] = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        key, _, value = line.partition(": ")
        headers.setdefault(key, []).append(value)
    return headers


def test_the_sdist_is_unlabelled_and_unpinned(ringops_sdist: Path) -> None:
    """Made by a kiln whose build venv holds torch 2.13 CPU, the sdist carries no +pt213cpu and no torch pin."""
    headers = _pkg_info(ringops_sdist)
    assert headers["Version"] == ["0.3.0"], headers
    (torch,) = [r for r in map(Requirement, headers.get("Requires-Dist", [])) if r.name == "torch"]
    assert torch.specifier == SpecifierSet(), headers["Requires-Dist"]
    with tarfile.open(ringops_sdist) as tar:
        names = tar.getnames()
    assert all(n.startswith("ringops-0.3.0/") for n in names), names
    assert "ringops-0.3.0/CMakeLists.txt" in names and "ringops-0.3.0/pyproject.toml" in names, names


def test_the_sdist_is_made_byte_for_byte_again(kiln_tool: KilnTool, ringops_clone: Path, ringops_sdist: Path,
                                               tmp_path: Path) -> None:
    """Its files dated by the commit (SOURCE_DATE_EPOCH), not by when it was made: a release can remake it."""
    proc = kiln_tool.run("-C", ringops_clone, "sdist", "--dist", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / ringops_sdist.name).read_bytes() == ringops_sdist.read_bytes()


@pytest.fixture(scope="module")
def segops_sdist(kiln_tool: KilnTool, segops_clone: Path) -> Path:
    """A setup.py project without a [project] table: kiln sdist has setuptools make it, in the build venv."""
    with timed("segops: kiln sdist (setuptools' build_sdist, repacked)"):
        proc = kiln_tool.run("-C", segops_clone, "sdist")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sdist = segops_clone / "build" / "sdist" / "segops-0.1.0.tar.gz"
    assert proc.stdout.strip() == str(sdist), proc.stdout
    return sdist


def test_a_setup_py_projects_sdist_is_unlabelled_and_builds_through_kiln(segops_sdist: Path) -> None:
    """The backend's own sdist, held to kiln's rules (plain version, torch unpinned), its members dated by the
    commit, with kiln_tool.sdist_backend as its build backend and setuptools' kept beside it."""
    import tomllib

    with tarfile.open(segops_sdist) as tar:
        names = tar.getnames()
        pkg_info = tar.extractfile("segops-0.1.0/PKG-INFO").read().decode()  # type: ignore[union-attr]
        pyproject = tomllib.loads(tar.extractfile("segops-0.1.0/pyproject.toml").read().decode())  # type: ignore[union-attr]
        mtimes = {m.mtime for m in tar.getmembers()}
    assert "Version: 0.1.0" in pkg_info.splitlines(), pkg_info
    assert not any(line.startswith("Requires-Dist: torch") and ("<" in line or "==" in line)
                   for line in pkg_info.splitlines()), pkg_info
    assert all(n.startswith("segops-0.1.0") for n in names) and "segops-0.1.0/setup.py" in names, names
    assert names == sorted(names) and len(mtimes) == 1, (names, mtimes)
    assert pyproject["build-system"]["build-backend"] == "kiln_tool.sdist_backend", pyproject
    assert "torch-kiln" in pyproject["build-system"]["requires"], pyproject
    assert pyproject["tool"]["kiln-sdist"] == {"backend": "setuptools.build_meta"}, pyproject
    assert pyproject["tool"]["kiln"] == {"libraries": "python-module"}, pyproject


def test_a_setup_py_projects_sdist_is_made_byte_for_byte_again(kiln_tool: KilnTool, segops_clone: Path,
                                                              segops_sdist: Path, tmp_path: Path) -> None:
    proc = kiln_tool.run("-C", segops_clone, "sdist", "--dist", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / segops_sdist.name).read_bytes() == segops_sdist.read_bytes()


def test_pip_builds_the_setup_py_sdist_pinned_described_and_guarded(segops_sdist: Path, kiln_tool: KilnTool,
                                                                   tmp_path: Path) -> None:
    """segops's sdist built by pip against torch 2.14.1 cu130 (no row of its matrix): the wheel keeps 0.1.0 (pip
    insists), is pinned to torch 2.14, its build info names that torch and the op its library registers, and the
    guard imports it. Cost: one C++ file against torch's headers, ~40-90 s by load."""
    import subprocess

    from support.venvs import make_venv

    python = make_venv(tmp_path / "user", "2.14.1", extra=[str(kiln_tool.wheel), "setuptools>=69"])
    cmd = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-index", "--no-deps",
           "--find-links", str(segops_sdist.parent), "--no-binary", "segops", "--no-build-isolation", "segops"]
    with timed("segops: pip install --no-binary from the sdist against torch 2.14.1 cu130"):
        proc = subprocess.run(cmd, cwd=tmp_path, env=adopter_env(python.parent), capture_output=True, text=True,
                              timeout=900, check=False)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    probe = run_python(python, (
        "import json, importlib.metadata as md, importlib.resources as r, segops, segops._kiln\n"
        "d = md.distribution('segops')\n"
        "info = json.loads(r.files('segops').joinpath('_build_info.json').read_text())\n"
        "print(json.dumps({'version': d.version, 'requires': d.requires, 'info': info}))\n"), tmp_path)
    assert probe.returncode == 0, probe.stdout + probe.stderr
    got = json.loads(probe.stdout.strip().splitlines()[-1])
    assert got["version"] == "0.1.0", got
    (torch,) = [r for r in map(Requirement, got["requires"] or []) if r.name == "torch"]
    assert torch.specifier == SpecifierSet(">=2.14,<2.15"), got["requires"]
    info = got["info"]
    assert info["torch_version"].split("+")[0] == "2.14.1" and info["version"] == "0.1.0", info
    assert info["build"] == "backend" and info["ops"] and all(op.startswith("segops::") for op in info["ops"]), info


def test_pip_builds_the_sdist_for_the_torch_it_finds(ringops_sdist: Path, kiln_tool: KilnTool,
                                                     tmp_path: Path) -> None:
    """torch 2.14.1 cu130 is in no row of ringops's matrix: the wheel built from the sdist is pinned to 2.14, its
    build info names 2.14.1, and the guard imports the package; its version is the sdist's (pip insists)."""
    import subprocess

    from support.venvs import make_venv

    python = make_venv(tmp_path / "user", "2.14.1", extra=[str(kiln_tool.wheel)])
    cmd = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-index", "--no-deps",
           "--find-links", str(ringops_sdist.parent), "--no-binary", "ringops", "--no-build-isolation", "ringops"]
    with timed("ringops: pip install --no-binary from the sdist against torch 2.14.1 cu130"):
        proc = subprocess.run(cmd, cwd=tmp_path, env=adopter_env(python.parent), capture_output=True, text=True,
                              timeout=900, check=False)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    probe = run_python(python, (
        "import json, importlib.metadata as md, importlib.resources as r, ringops, ringops._kiln\n"
        "d = md.distribution('ringops')\n"
        "info = json.loads(r.files('ringops').joinpath('_build_info.json').read_text())\n"
        "print(json.dumps({'version': d.version, 'requires': d.requires, 'info': info}))\n"), tmp_path)
    assert probe.returncode == 0, probe.stdout + probe.stderr
    got = json.loads(probe.stdout.strip().splitlines()[-1])
    assert got["version"] == "0.3.0", got
    (torch,) = [r for r in map(Requirement, got["requires"] or []) if r.name == "torch"]
    assert torch.specifier == SpecifierSet(">=2.14,<2.15"), got["requires"]
    assert got["info"]["torch_version"].split("+")[0] == "2.14.1", got["info"]
    assert got["info"]["torch_major_minor"] == "2.14", got["info"]
    assert got["info"]["cuda_tag"] == "cu130" and got["info"]["version"] == "0.3.0", got["info"]


def test_a_missing_compiler_is_one_message_saying_what_to_install(tmp_path: Path) -> None:
    """A user building the sdist without a C++ compiler: kiln_configure() stops before project() with what to
    install, not project()'s CMAKE_CXX_COMPILER page. No compiler is hidden by ignoring every system folder."""
    import shutil
    import subprocess

    from adopters.adopting import REPO

    cmake = shutil.which("cmake", path=str(REPO / ".venv" / "bin")) or shutil.which("cmake")
    if cmake is None:
        pytest.skip("no cmake")
    (tmp_path / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.26)\n"
                                             "find_package(Kiln CONFIG REQUIRED)\nkiln_configure()\n"
                                             "project(nocxx LANGUAGES ${KILN_LANGUAGES})\n")
    env = {k: v for k, v in adopter_env(Path(cmake).parent).items() if k not in ("CXX", "CC")}
    env["PATH"] = str(Path(cmake).parent)
    hidden = ["-DCMAKE_IGNORE_PREFIX_PATH=/usr;/usr/local;/", "-DCMAKE_IGNORE_PATH=/usr/bin;/bin;/usr/local/bin"]
    proc = subprocess.run([cmake, "-S", str(tmp_path), "-B", str(tmp_path / "build"), "-G", "Ninja",
                           f"-DKiln_DIR={REPO / 'cmake'}", *hidden], env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0, out
    assert "kiln: no C++ compiler found" in out and "apt-get install g++" in out, out
    assert "CMAKE_CXX_COMPILER" not in out, out


def _configure(source: Path, build: Path, env: dict[str, str], *defines: str) -> str:
    """cmake's configure of ``source`` as a build from the sdist runs it (scikit-build-core calls it the same way),
    its output on one line."""
    import shutil
    import subprocess

    from adopters.adopting import REPO

    cmake = shutil.which("cmake", path=str(REPO / ".venv" / "bin")) or shutil.which("cmake")
    if cmake is None:
        pytest.skip("no cmake")
    env = {**env, "PATH": f"{Path(cmake).parent}:{env.get('PATH', '/usr/bin:/bin')}"}
    proc = subprocess.run([cmake, "-S", str(source), "-B", str(build), "-G", "Ninja", f"-DKiln_DIR={REPO / 'cmake'}",
                           *defines], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    return " ".join((proc.stdout + proc.stderr).split())


def test_cxx_naming_no_compiler_is_one_message_saying_what_to_install(tmp_path: Path) -> None:
    """CXX set to a compiler this machine lacks: kiln_configure() says so before project(), not CMake's page."""
    (tmp_path / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.26)\n"
                                             "find_package(Kiln CONFIG REQUIRED)\nkiln_configure()\n"
                                             "project(nocxx LANGUAGES ${KILN_LANGUAGES})\n")
    for cxx in ("/nowhere/g++", "no-such-c++ -m64"):
        out = _configure(tmp_path, tmp_path / "build", {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "CXX": cxx})
        assert f"kiln: CXX={cxx} names no compiler on this machine: install one (apt-get install g++" in out, out
        assert "CMAKE_CXX_COMPILER" not in out and "Could not find the compiler" not in out, out


def test_a_cuda_torch_without_nvcc_is_one_message_saying_what_to_install(tmp_path: Path) -> None:
    """ringops's sdist configured against torch 2.14.1 cu130 on a machine without the CUDA toolkit: nvcc off PATH,
    no CUDA_HOME, and this machine's toolkit folder hidden by an empty folder mounted over it in a private mount
    namespace (unshare -m: the STAND-IN for a machine that never had it). One message: what to install."""
    import os
    import shutil
    import subprocess

    from support.venvs import CU130_VENV, skip_without_cu130

    skip_without_cu130()
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-m", "true"], capture_output=True,
                                                          check=False).returncode != 0:
        pytest.skip("unshare -m is not permitted here: the CUDA toolkit cannot be hidden")
    source = tmp_path / "ringops"
    shutil.copytree(Path(__file__).parent / "projects" / "ringops", source)
    empty = tmp_path / "empty"
    empty.mkdir()
    toolkits = sorted({os.path.realpath(p) for p in ("/usr/local/cuda",) if os.path.isdir(p)})
    mounts = "".join(f"mount --bind {empty} {shlex_quote(t)} && " for t in toolkits)
    cmake = shutil.which("cmake", path=str(Path(__file__).parents[2] / ".venv" / "bin")) or "cmake"
    script = (f"{mounts}exec {shlex_quote(cmake)} -S {source} -B {tmp_path / 'build'} -G Ninja "
              f"-DKiln_DIR={Path(__file__).parents[2] / 'cmake'} -DPython_EXECUTABLE={CU130_VENV / 'bin' / 'python'}")
    path = ":".join(p for p in os.environ.get("PATH", "").split(":") if p and not Path(p, "nvcc").exists())
    env = {"HOME": str(tmp_path), "PATH": f"{Path(cmake).parent}:{path}"}
    proc = subprocess.run(["unshare", "-m", "bash", "-c", script], env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0, out
    assert "kiln: a CUDA build was asked for (torch 2.14.1+cu130 uses CUDA 13.0), but no usable nvcc was found" in out
    assert "Install the CUDA 13.0 toolkit" in out and "KILN_VARIANT=cpu" in out, out
    assert "CMAKE_CUDA_COMPILER" not in out, out


def shlex_quote(text: str) -> str:
    import shlex

    return shlex.quote(text)
