"""A site whose wheels live on a second server installs with pip and uv, by hash.

The real CPU wheel (repaired, audited by `kiln index --storage ...`) is uploaded to release assets (the
stand-in gh, tools/fake_gh.py, its assets served over HTTP on 127.0.0.2) or to moto's S3 server on
127.0.0.2; the pages are served on 127.0.0.1. pip and uv, with --no-index, follow the page's absolute
cross-host link, check its #sha256 (and --require-hashes), install, and the op runs. The page server
never serves a wheel.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

from index.helpers import KILN
from index.storage_servers import S3_CREDENTIALS, Http, http_server, release_assets, s3_server
from index.test_install import RUN_OP, _run, _uv

pytestmark = pytest.mark.slow


@dataclass
class StoredSite:
    backend: str
    pages: Http
    wheel_url: str
    wheel_requests: list[str] | None  # what the wheel host served, where the test can see it


@pytest.fixture(scope="module", params=["github-release", "s3"])
def stored_site(request: pytest.FixtureRequest, published_wheel: Path,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[StoredSite]:
    tmp = tmp_path_factory.mktemp(f"stored-{request.param}")
    dist = tmp / "dist"
    dist.mkdir()
    (dist / published_wheel.name).write_bytes(published_wheel.read_bytes())
    site = tmp / "www" / "opkiln"
    site.parent.mkdir()
    with ExitStack() as stack:
        pages = stack.enter_context(http_server(site.parent, "127.0.0.1"))
        config = tmp / "storage.json"
        requests: list[str] | None
        if request.param == "github-release":
            assets = stack.enter_context(release_assets(tmp))
            config.write_text(json.dumps({"backend": "github-release"}))
            env, extra, requests = assets.env(), ["--repository", "opkiln/opkiln", "--tag", "v0.1.0"], \
                assets.host.requests
        else:
            s3 = stack.enter_context(s3_server())
            config.write_text(json.dumps(s3.config()))
            env, extra, requests = {**os.environ, **S3_CREDENTIALS}, [], None
        result = subprocess.run([sys.executable, str(KILN), "index", str(dist), str(site), "--base-url",
                                 f"{pages.url}opkiln/", "--storage", str(config), *extra],
                                capture_output=True, text=True, env=env, timeout=600)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "audited" in result.stdout and not (site / "wheels").exists()
        (entry,) = json.loads((site / "kiln-index.json").read_text())["wheels"]
        assert entry["url"].startswith("http://127.0.0.2:")
        yield StoredSite(request.param, pages, entry["url"], requests)


@pytest.fixture
def venv(fresh_venv: Path, stored_site: StoredSite) -> Iterator[Path]:
    stored_site.pages.requests.clear()
    if stored_site.wheel_requests is not None:
        stored_site.wheel_requests.clear()
    yield fresh_venv
    _run(fresh_venv, "-m", "pip", "uninstall", "-y", "-q", "opkiln")


def _installed(python: Path, wheel: Path, site: StoredSite) -> None:
    run = _run(python, "-c", RUN_OP)
    assert run.returncode == 0, run.stderr
    version, values = run.stdout.strip().splitlines()[-2:]
    assert wheel.name.startswith(f"opkiln-{version}-") and values == "[0.25, 0.25, 0.25]"
    assert not any(p.endswith(".whl") for p in site.pages.requests), "the page server served a wheel"
    if site.wheel_requests is not None:
        assert any(p.endswith(".whl") for p in site.wheel_requests), site.wheel_requests


def test_pip_follows_the_cross_host_link(venv: Path, stored_site: StoredSite, published_wheel: Path) -> None:
    page = f"{stored_site.pages.url}opkiln/cpu/torch2.13/index.html"
    result = _run(venv, "-m", "pip", "install", "--no-cache-dir", "--no-index", "opkiln", "-f", page)
    assert result.returncode == 0, result.stdout + result.stderr
    _installed(venv, published_wheel, stored_site)


def test_uv_follows_the_cross_host_link(venv: Path, stored_site: StoredSite, published_wheel: Path) -> None:
    page = f"{stored_site.pages.url}opkiln/cpu/torch2.13/index.html"
    result = _run(_uv(), "pip", "install", "--python", venv, "--no-cache", "--no-index", "opkiln",
                  "--find-links", page)
    assert result.returncode == 0, result.stdout + result.stderr
    _installed(venv, published_wheel, stored_site)


def test_pip_and_uv_check_the_hash(venv: Path, stored_site: StoredSite, published_wheel: Path,
                                   tmp_path: Path) -> None:
    version = published_wheel.name.split("-")[1]
    digest = hashlib.sha256(published_wheel.read_bytes()).hexdigest()
    simple = f"{stored_site.pages.url}opkiln/simple"
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(f"opkiln=={version} --hash=sha256:{'0' * 64}\n")
    wrong = _run(venv, "-m", "pip", "install", "--no-cache-dir", "--require-hashes", "--index-url", simple,
                 "-r", requirements)
    assert wrong.returncode != 0 and "DO NOT MATCH THE HASHES" in wrong.stderr
    wrong_uv = _run(_uv(), "pip", "install", "--python", venv, "--no-cache", "--require-hashes", "--index-url",
                    simple, "-r", requirements)
    assert wrong_uv.returncode != 0 and "hash" in wrong_uv.stderr.lower(), wrong_uv.stderr

    requirements.write_text(f"opkiln=={version} --hash=sha256:{digest}\n")
    result = _run(venv, "-m", "pip", "install", "--no-cache-dir", "--require-hashes", "--index-url", simple,
                  "-r", requirements)
    assert result.returncode == 0, result.stdout + result.stderr
    _installed(venv, published_wheel, stored_site)
    _run(venv, "-m", "pip", "uninstall", "-y", "-q", "opkiln")
    # uv hash-checks every requirement it resolves (torch too): --no-deps, as torch is installed already.
    result = _run(_uv(), "pip", "install", "--python", venv, "--no-cache", "--require-hashes", "--no-deps",
                  "--index-url", simple, "-r", requirements)
    assert result.returncode == 0, result.stdout + result.stderr
    _installed(venv, published_wheel, stored_site)


def test_a_page_hash_that_does_not_match_the_stored_wheel_is_refused(venv: Path, stored_site: StoredSite) -> None:
    """The #sha256 on the page is what protects the cross-host download: a page naming other bytes fails."""
    name = stored_site.wheel_url.rsplit("/", 1)[1]
    (stored_site.pages.root / "wrong-hash.html").write_text(
        f'<a href="{stored_site.wheel_url}#sha256={"1" * 64}">{name}</a>\n')
    page = f"{stored_site.pages.url}wrong-hash.html"
    for command in ([venv, "-m", "pip", "install", "--no-cache-dir", "--no-index", "opkiln", "-f", page],
                    [_uv(), "pip", "install", "--python", venv, "--no-cache", "--no-index", "opkiln",
                     "--find-links", page]):
        result = _run(*command)
        assert result.returncode != 0, result.stdout
        assert "hash" in result.stderr.lower(), result.stderr
