"""Fixtures of the `kiln index` tests: a published (repaired, audited) wheel, the real CLI,
a real HTTP server on 127.0.0.1, one site built per session, one fresh venv with torch."""

from __future__ import annotations

import http.server
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from index.helpers import KILN, QuietHandler, Server, kiln_index

ARTIFACTS = Path(__file__).resolve().parents[1] / "_artifacts" / "index"


@pytest.fixture(scope="session")
def published_wheel(cpu_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The CPU wheel as a release publishes it: repaired by `kiln repair`, so it passes the audit."""
    if "manylinux" in cpu_wheel.name:
        return cpu_wheel
    out = tmp_path_factory.mktemp("repaired")
    result = subprocess.run([sys.executable, str(KILN), "repair", str(cpu_wheel), "-w", str(out)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = out.glob("*.whl")
    return wheel


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A real HTTP server on 127.0.0.1 (random port) serving a directory; sites live in subdirectories."""
    root = tmp_path_factory.mktemp("www")
    requests: list[str] = []
    handler_class = type("Handler", (QuietHandler,), {"requests": requests})

    def handler(*args: object, **kwargs: object) -> http.server.SimpleHTTPRequestHandler:
        return handler_class(*args, directory=str(root), **kwargs)  # type: ignore[arg-type]

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield Server(root=root, url=f"http://127.0.0.1:{httpd.server_address[1]}/", requests=requests)
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="session")
def site(server: Server, published_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site `kiln index dist site --base-url ...` makes of the published CPU wheel, served under /opkiln/."""
    dist = tmp_path_factory.mktemp("dist")
    shutil.copy2(published_wheel, dist / published_wheel.name)
    out = server.root / "opkiln"
    result = kiln_index(dist, out, "--base-url", f"{server.url}opkiln/")
    assert result.returncode == 0, result.stdout + result.stderr
    return out


@pytest.fixture(scope="session")
def site_url(server: Server, site: Path) -> str:
    return f"{server.url}opkiln/"


@pytest.fixture(scope="session")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Python of a fresh venv with torch 2.13.0 (CPU) and pip, nothing of ours: made by uv from its cache (the
    tests install our wheel into it with the user's pip; installing torch with pip too cost 112 s of CI)."""
    from support.venvs import make_venv

    return make_venv(tmp_path_factory.mktemp("index-venv") / "venv", "2.13.0")


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS
