"""ringops, a project that is not opkiln, published as opkiln is: `kiln release` of its two wheels (CPU torch 2.13,
CUDA 13.0 torch 2.14) onto a site served on 127.0.0.1, through each storage backend (wheels in the site folder, S3
through moto's real server, GitHub release assets through the stand-in gh), by the installed tool. Then, as its
users: `pip install ringops -f <page>` from the served site gets the published bytes and runs; the wheel of the
other torch, installed beside this torch, is refused by ringops' own import guard naming the page of the site that
fits; and a rebuilt wheel under a published name is refused with the site left as it was.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from adopters.adopting import Built, KilnTool, adopter_env, run_python
from index.storage_servers import S3_CREDENTIALS, Http, http_server, release_assets, s3_server
from kiln_tool.audit.release_rule import STANDIN_ENV
from support.venvs import make_venv

pytestmark = pytest.mark.slow

BACKENDS = ("site", "s3", "github-release")


def _digests(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _tag(dist: Path) -> str:
    (tag,) = {re.sub(r"^(manylinux_\d+_\d+)_.*$", r"\1", w.name.rsplit("-", 1)[1]) for w in dist.glob("*.whl")}
    return tag


def _deploy(site: Path, served: Path) -> None:
    shutil.rmtree(served, ignore_errors=True)
    shutil.copytree(site, served)


@pytest.fixture(scope="module")
def tool_with_boto3(kiln_tool: KilnTool) -> KilnTool:
    """The installed tool, plus boto3 for the S3 backend (docs/storage.md: the S3 backend's one extra)."""
    pip = subprocess.run([str(kiln_tool.venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "boto3"],
                         capture_output=True, text=True, timeout=600)
    assert pip.returncode == 0, pip.stderr
    return kiln_tool


@pytest.fixture(scope="module")
def released(tool_with_boto3: KilnTool, ringops_clone: Path, ringops_cpu: Built, ringops_cu130: Built,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[Http, Path, Path]]]:
    """backend -> (the served site, its folder, the release's DIST), each released once onto an empty site."""
    root = tmp_path_factory.mktemp("publish")
    dist = root / "dist"
    dist.mkdir()
    for wheel in (ringops_cpu.wheel("pt213cpu"), ringops_cu130.wheel("pt214cu130")):
        shutil.copy2(wheel, dist / wheel.name)
    sites: dict[str, tuple[Http, Path, Path]] = {}
    with contextlib.ExitStack() as stack:
        s3 = stack.enter_context(s3_server())
        assets = stack.enter_context(release_assets(root / "gh"))
        for backend in BACKENDS:
            served = root / f"served-{backend}"
            served.mkdir()
            host = stack.enter_context(http_server(served))
            # These wheels are built on this host (glibc 2.36), not in the manylinux_2_28 image: the release audit is
            # told so (the stand-in's variable, as `make release-rehearsal` does) and asserts their one tag instead.
            env = adopter_env(tool_with_boto3.venv / "bin") | {STANDIN_ENV: _tag(dist)}
            config: dict[str, object] = {"backend": backend, "metadata": True}
            extra: list[str] = []
            if backend == "s3":
                config = s3.config(prefix="ringops/")
                env |= S3_CREDENTIALS
            elif backend == "github-release":
                env |= {"PATH": f"{assets.bin_dir}{os.pathsep}{env['PATH']}", "FAKE_GH_ROOT": str(assets.root),
                        "FAKE_GH_DOWNLOAD_URL": assets.host.url}
                extra = ["--repository", "ringops/ringops", "--tag", "v0.3.0"]
            storage = root / f"storage-{backend}.json"
            storage.write_text(json.dumps(config))
            site = root / f"site-{backend}"
            result = subprocess.run(
                [str(tool_with_boto3.kiln), "-C", str(ringops_clone), "release", str(dist), str(site),
                 "--base-url", host.url, "--storage", str(storage), "--first-release", *extra],
                capture_output=True, text=True, env=env, cwd=tool_with_boto3.workdir, timeout=900)
            assert result.returncode == 0, f"{backend}: {result.stdout}\n{result.stderr}"
            _deploy(site, served)
            sites[backend] = (host, served, dist)
        yield sites


def test_each_backend_lists_both_wheels_on_the_pages_of_their_torch_and_serves_their_bytes(
        released: dict[str, tuple[Http, Path, Path]], ringops_cpu: Built, ringops_cu130: Built) -> None:
    """What pip fetches from each backend's site: the page of each torch links its wheel, and the link (in the
    site, in the bucket, or a release asset) serves the built bytes. pip itself installs from one of them below."""
    built = {w.name: w for w in (ringops_cpu.wheel("pt213cpu"), ringops_cu130.wheel("pt214cu130"))}
    for backend, (host, served, _dist) in released.items():
        manifest = json.loads((served / "kiln-index.json").read_text())
        entries = {e["filename"]: e for e in manifest["wheels"]}
        assert set(entries) == set(built), backend
        for name, entry in entries.items():
            assert entry["project"] == "ringops"
            combo = entry["combos"][0]
            page = (served / combo["cuda"] / f"torch{combo['torch']}" / "index.html").read_text()
            link = re.search(r'href="([^"#]*' + re.escape(urllib.parse.quote(name)) + r')#sha256=([0-9a-f]{64})"', page)
            assert link, f"{backend}: {name} is not on its page"
            url = urllib.parse.urljoin(f"{host.url}{combo['cuda']}/torch{combo['torch']}/", link.group(1))
            with urllib.request.urlopen(url, timeout=60) as response:
                body = response.read()
            assert body == built[name].read_bytes(), f"{backend}: {url} serves other bytes"
            assert link.group(2) == hashlib.sha256(body).hexdigest()
        assert (backend == "site") == (served / "wheels").is_dir(), backend


@pytest.mark.parametrize("backend", ["github-release"])  # the default storage; the others' bytes are checked above
def test_users_install_the_published_bytes_and_a_mismatched_torch_gets_the_guards_page(
        released: dict[str, tuple[Http, Path, Path]], ringops_cpu: Built, ringops_cu130: Built, backend: str,
        tmp_path: Path) -> None:
    host, _served, _dist = released[backend]
    cpu = ringops_cpu.wheel("pt213cpu")
    venv = make_venv(tmp_path / "user", "2.13.0")
    page = f"{host.url}cpu/torch2.13/"
    install = subprocess.run([str(venv), "-m", "pip", "install", "--quiet", "--no-deps", "--only-binary=:all:",
                              "ringops", "-f", page], capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stdout + install.stderr
    installed = next((venv.parent.parent / "lib").glob("python3*/site-packages/ringops"))
    with zipfile.ZipFile(cpu) as archive:
        (member,) = [n for n in archive.namelist() if n.startswith("ringops/_C") and n.endswith(".so")]
        assert hashlib.sha256((installed.parent / member).read_bytes()).hexdigest() == \
            hashlib.sha256(archive.read(member)).hexdigest()
    run = run_python(venv, "import torch, ringops; print(ringops.ring_shift(torch.arange(4.), 1).tolist())", tmp_path)
    assert run.returncode == 0 and run.stdout.strip() == "[3.0, 0.0, 1.0, 2.0]", run.stderr
    # The CUDA 13.0 / torch 2.14 wheel, from its page, beside torch 2.13: ringops' guard refuses it and names the
    # page of this site for torch 2.13 CPU (RINGOPS_INDEX_URL: the guard's mirror variable, here the served site).
    other = subprocess.run([str(venv), "-m", "pip", "install", "--quiet", "--no-deps", "--force-reinstall",
                            "--only-binary=:all:", "ringops", "-f", f"{host.url}cu130/torch2.14/"],
                           capture_output=True, text=True, timeout=600)
    assert other.returncode == 0, other.stderr
    env = adopter_env(venv.parent) | {"RINGOPS_INDEX_URL": host.url.rstrip("/")}
    refused = subprocess.run([str(venv), "-c", "import ringops"], capture_output=True, text=True, env=env,
                             cwd=tmp_path, timeout=300)
    assert refused.returncode == 1
    message = " ".join(refused.stderr.split())
    assert "Traceback" in refused.stderr and "ImportError" not in refused.stderr.splitlines()[-1][:12]
    assert f"pip install ringops -f {page}" in message or f"pip install --force-reinstall --no-deps ringops -f {page}" \
        in message, refused.stderr[-3000:]
    assert ringops_cu130.wheel("pt214cu130").name.split("-")[1] in message, "it says what the wheel was built for"


def test_a_rebuilt_wheel_under_a_published_name_is_refused_and_the_site_unchanged(
        released: dict[str, tuple[Http, Path, Path]], tool_with_boto3: KilnTool, ringops_clone: Path,
        ringops_cpu: Built, tmp_path: Path) -> None:
    """Other bytes under a published name: the same wheel with its members dated otherwise (a rebuild at another
    SOURCE_DATE_EPOCH gives exactly that), released onto the site-folder backend's published site."""
    host, served, _dist = released["site"]
    wheel = ringops_cpu.wheel("pt213cpu")
    rebuilt = tmp_path / "dist" / wheel.name
    rebuilt.parent.mkdir()
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(rebuilt, "w", zipfile.ZIP_DEFLATED) as out:
        for info in src.infolist():
            info.date_time = (2027, 1, 1, 0, 0, 0)
            out.writestr(info, src.read(info.filename))
    assert rebuilt.read_bytes() != wheel.read_bytes()
    before = _digests(served)
    storage = tmp_path / "storage.json"
    storage.write_text(json.dumps({"backend": "site", "metadata": True}))
    result = subprocess.run([str(tool_with_boto3.kiln), "-C", str(ringops_clone), "release", str(rebuilt.parent),
                             str(tmp_path / "site"), "--base-url", host.url, "--storage", str(storage)],
                            capture_output=True, text=True, cwd=tool_with_boto3.workdir, timeout=900,
                            env=adopter_env(tool_with_boto3.venv / "bin") | {STANDIN_ENV: _tag(rebuilt.parent)})
    assert result.returncode == 1, result.stdout + result.stderr
    assert "never replaced" in result.stdout + result.stderr and wheel.name in result.stdout + result.stderr
    assert _digests(served) == before
