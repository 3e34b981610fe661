"""Users install from the site, served by a real HTTP server on 127.0.0.1, into a fresh venv that holds
torch 2.13.0 (CPU): pip and uv, through the find-links page, the flat page and the simple index (also
with --require-hashes); then the op runs.

--no-index / no extra index: the only place opkiln can come from is the site under test.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from index.helpers import Server

pytestmark = pytest.mark.slow

RUN_OP = (
    "import opkiln, torch; "
    "print(opkiln.__version__); "
    "print(opkiln.weighted_sum(torch.ones(3), torch.zeros(3), 0.25).tolist())"
)


def _uv() -> str:
    found = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if found is None:
        pytest.fail("uv is not installed (requirements/dev.txt pins it)")
    return found


def _env() -> dict[str, str]:
    # No user or site pip configuration: what a user with a plain pip would do.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    return {**env, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_CONFIG_FILE": os.devnull, "UV_NO_CONFIG": "1"}


def _run(*cmd: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=600, env=_env())


@pytest.fixture
def venv(fresh_venv: Path, published_wheel: Path, server: Server) -> Iterator[Path]:
    """The session's fresh venv; opkiln is uninstalled again after each test."""
    server.requests.clear()
    yield fresh_venv
    _run(fresh_venv, "-m", "pip", "uninstall", "-y", "-q", "opkiln")


def _assert_installed_and_runs(python: Path, wheel: Path, server: Server, site_path: str) -> None:
    result = _run(python, "-c", RUN_OP)
    assert result.returncode == 0, result.stderr
    version, values = result.stdout.strip().splitlines()[-2:]
    assert wheel.name.startswith(f"opkiln-{version}-")
    assert values == "[0.25, 0.25, 0.25]"
    fetched = [p for p in server.requests if p.startswith(f"/{site_path}wheels/") and p.endswith(".whl")]
    assert fetched, f"the wheel was not downloaded from the site: {server.requests}"


def test_pip_find_links_page(venv: Path, site_url: str, published_wheel: Path, server: Server) -> None:
    result = _run(venv, "-m", "pip", "install", "--no-cache-dir", "--no-index", "opkiln",
                  "-f", f"{site_url}cpu/torch2.13/index.html")
    assert result.returncode == 0, result.stdout + result.stderr
    _assert_installed_and_runs(venv, published_wheel, server, "opkiln/")


def test_pip_flat_page(venv: Path, site_url: str, published_wheel: Path, server: Server) -> None:
    result = _run(venv, "-m", "pip", "install", "--no-cache-dir", "--no-index", "opkiln",
                  "-f", f"{site_url}torch-2.13.0+cpu.html")
    assert result.returncode == 0, result.stdout + result.stderr
    _assert_installed_and_runs(venv, published_wheel, server, "opkiln/")


def test_pip_simple_index_uses_pep658_metadata(venv: Path, site_url: str, published_wheel: Path,
                                                server: Server) -> None:
    result = _run(venv, "-m", "pip", "install", "--no-cache-dir", "--index-url", f"{site_url}simple", "opkiln")
    assert result.returncode == 0, result.stdout + result.stderr
    _assert_installed_and_runs(venv, published_wheel, server, "opkiln/")
    assert "/opkiln/simple/opkiln/" in server.requests
    assert any(p.endswith(".whl.metadata") for p in server.requests), "pip did not use the PEP 658 metadata"


def test_pip_require_hashes(venv: Path, site_url: str, published_wheel: Path, server: Server,
                            tmp_path: Path) -> None:
    version = published_wheel.name.split("-")[1]
    digest = hashlib.sha256(published_wheel.read_bytes()).hexdigest()
    requirements = tmp_path / "requirements.txt"

    requirements.write_text(f"opkiln=={version} --hash=sha256:{'0' * 64}\n")
    wrong = _run(venv, "-m", "pip", "install", "--no-cache-dir", "--require-hashes", "--index-url",
                 f"{site_url}simple", "-r", requirements)
    assert wrong.returncode != 0
    assert "DO NOT MATCH THE HASHES" in wrong.stderr

    requirements.write_text(f"opkiln=={version} --hash=sha256:{digest}\n")
    result = _run(venv, "-m", "pip", "install", "--no-cache-dir", "--require-hashes", "--index-url",
                  f"{site_url}simple", "-r", requirements)
    assert result.returncode == 0, result.stdout + result.stderr
    _assert_installed_and_runs(venv, published_wheel, server, "opkiln/")


def test_uv_find_links_page(venv: Path, site_url: str, published_wheel: Path, server: Server) -> None:
    result = _run(_uv(), "pip", "install", "--python", venv, "--no-cache", "--no-index", "opkiln",
                  "--find-links", f"{site_url}cpu/torch2.13/index.html")
    assert result.returncode == 0, result.stdout + result.stderr
    _assert_installed_and_runs(venv, published_wheel, server, "opkiln/")


def test_uv_simple_index(venv: Path, site_url: str, published_wheel: Path, server: Server) -> None:
    result = _run(_uv(), "pip", "install", "--python", venv, "--no-cache", "--index-url", f"{site_url}simple",
                  "opkiln")
    assert result.returncode == 0, result.stdout + result.stderr
    _assert_installed_and_runs(venv, published_wheel, server, "opkiln/")
    assert any(p.endswith(".whl.metadata") for p in server.requests), "uv did not use the PEP 658 metadata"


CU130_VENV = Path(__file__).resolve().parents[2] / ".venvs" / "torch2.14-cu130-py3.11"


@pytest.fixture(scope="module")
def cuda_site_url(server: Server, cuda_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The site of the torch 2.14 + CUDA 13.0 wheel (repaired and audited like a release's)."""
    dist = tmp_path_factory.mktemp("dist-cu130")
    if "manylinux" in cuda_wheel.name:
        shutil.copy2(cuda_wheel, dist / cuda_wheel.name)
    else:
        result = _run(sys.executable, Path(__file__).resolve().parents[2] / "scripts" / "kiln", "repair",
                      cuda_wheel, "-w", dist)
        assert result.returncode == 0, result.stdout + result.stderr
    url = f"{server.url}opkiln-cu130/"
    result = _run(sys.executable, Path(__file__).resolve().parents[2] / "scripts" / "kiln", "index", dist,
                  server.root / "opkiln-cu130", "--base-url", url)
    assert result.returncode == 0, result.stdout + result.stderr
    return url


@pytest.fixture(scope="module")
def torch214_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv seeing torch 2.14.1+cu130 of the CUDA build venv (a .pth file, not a 3.7 GB reinstall)."""
    if not CU130_VENV.exists():
        pytest.skip(f"{CU130_VENV} is missing (make wheels VARIANT=cu130 creates it)")
    venv = tmp_path_factory.mktemp("index-venv-cu130") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    site_packages = next((venv / "lib").glob("python3*/site-packages"))
    build_site = next((CU130_VENV / "lib").glob("python3*/site-packages"))
    (site_packages / "torch_from_build_venv.pth").write_text(f"{build_site}\n")
    return venv / "bin" / "python"


def test_pip_find_links_page_cuda(torch214_python: Path, cuda_site_url: str, server: Server) -> None:
    """The cu130/torch2.14 page installs the CUDA wheel next to torch 2.14.1+cu130; its op runs (on the CPU).

    --no-deps: torch here comes from a .pth file whose own dependencies pip would try to complete.
    """
    server.requests.clear()
    result = _run(torch214_python, "-m", "pip", "install", "--no-cache-dir", "--no-index", "--no-deps", "opkiln",
                  "-f", f"{cuda_site_url}cu130/torch2.14/index.html")
    assert result.returncode == 0, result.stdout + result.stderr
    run = _run(torch214_python, "-c", RUN_OP)
    assert run.returncode == 0, run.stderr
    version, values = run.stdout.strip().splitlines()[-2:]
    assert version.endswith("+pt214cu130")
    assert values == "[0.25, 0.25, 0.25]"
    assert any(p.startswith("/opkiln-cu130/wheels/") for p in server.requests)
