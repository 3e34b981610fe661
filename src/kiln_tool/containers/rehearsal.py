"""The release rehearsal: the release path on real cibuildwheel wheels, then installs as a user would.

1. `kiln release` (the same code release.yml runs) on the wheels of `kiln cibuildwheel`: the torch
   ABIs, the release audit, the fetch of the published manifest (served by a real HTTP server on
   127.0.0.1, empty at first), the upload of the wheels as release assets through the same gh
   interface (kiln_tool.index.storage.GhCli) running the stand-in gh (tools/fake_gh.py; no GitHub
   here), its assets served by a second HTTP server, and the merge; the pages are "deployed" to the
   first server, and link the wheels on the second.
2. For each wheel, in a fresh container of the runtime image (no compiler, no build tools; the host's
   network, so 127.0.0.1 is the server), `pip install opkiln -f <its combination's page>` and
   `uv pip install opkiln -f <page>` into new venvs, each resolving torch itself from the package
   sources this machine has; then `import opkiln` and every op's sample call.
3. A rebuilt wheel of the same version (another SOURCE_DATE_EPOCH, so other bytes under a published
   name) goes through the same release path: refused, and the published site is byte-identical.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ..index.storage import GhCli
from ..op_smoke import EXERCISE_ALL_OPS, samples_json
from ..release import ReleaseError, run_release
from .cibw import HOST_MOUNT, host_pip_sources
from .engine import ContainerError, Engine, docker
from .images import Base

Say = Callable[[str], None]
CONTAINER_PYTHON = "/opt/python/cp311-cp311/bin/python"
REPO = Path(__file__).resolve().parents[3]
REPOSITORY = "opkiln/opkiln"


def stand_in_gh(work: Path, assets: Path, assets_url: str) -> GhCli:
    """The gh interface kiln release uses, running tools/fake_gh.py (a stand-in, not GitHub's CLI)."""
    bin_dir = work / "stand-in-gh"
    subprocess.run([sys.executable, str(REPO / "tools" / "fake_gh.py"), "install", str(bin_dir)], check=True,
                   capture_output=True)
    env = {**os.environ, "FAKE_GH_ROOT": str(assets), "FAKE_GH_DOWNLOAD_URL": assets_url}
    return GhCli(executable=str(bin_dir / "gh"), env=env)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def serve(directory: Path) -> Iterator[str]:
    """A real HTTP server for `directory` on 127.0.0.1 (a free port); yields its base URL."""
    def handler(*args: object, **kwargs: object) -> _Quiet:
        return _Quiet(*args, directory=str(directory), **kwargs)  # type: ignore[arg-type]

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def deploy(site: Path, published: Path) -> None:
    """Replace what the server serves by `site` (as a Pages deployment replaces the whole site)."""
    for child in published.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
    shutil.copytree(site, published, dirs_exist_ok=True)


@dataclass
class InstallResult:
    wheel: str
    page: str
    installer: str
    seconds: float
    output: dict[str, object] = field(default_factory=dict)


def _pages(site: Path) -> dict[str, str]:
    """wheel file name -> its first combination's find-links page (relative), from the manifest."""
    manifest = json.loads((site / "kiln-index.json").read_text())
    pages = {}
    for entry in manifest["wheels"]:
        combo = entry["combos"][0]
        pages[entry["filename"]] = f"{combo['cuda']}/torch{combo['torch']}/"
    return pages


def _pip_mounts() -> list[str]:
    """-v options for the local package sources the container's pip and uv read (read-only, under /host)."""
    mounts: list[str] = []
    for value in host_pip_sources().values():
        for item in value.split():
            path = item.removeprefix("file://")
            if path.startswith(HOST_MOUNT + "/"):
                host = path[len(HOST_MOUNT):]
                top = "/" + host.strip("/").split("/")[0] + "/" + host.strip("/").split("/")[1]
                option = f"{top}:{HOST_MOUNT}{top}:ro"
                if Path(top).exists() and option not in mounts:
                    mounts.append(option)
    return mounts


def _install_script(url: str, page: str, uv_sources: list[str]) -> str:
    samples = shlex.quote(samples_json())
    exercise = shlex.quote(EXERCISE_ALL_OPS)
    sources = " ".join(shlex.quote(s) for s in uv_sources)
    return f"""set -euo pipefail
for tool in gcc cc c++ g++ nvcc make cmake; do
  if command -v "$tool" >/dev/null; then
    echo "rehearsal: this image has $tool: not a fresh user machine" >&2
    exit 3
  fi
done
start=$EPOCHREALTIME
{CONTAINER_PYTHON} -m venv /tmp/pip-env
/tmp/pip-env/bin/python -m pip install --quiet --only-binary=:all: opkiln -f {shlex.quote(url + page)}
/tmp/pip-env/bin/python -c {exercise} {samples} > /tmp/pip.json
echo "PIPSO $(sha256sum /tmp/pip-env/lib/python3*/site-packages/opkiln/_C*.so | cut -d' ' -f1)"
echo "PIP $(cat /tmp/pip.json) SECONDS $(python3 -c "print($EPOCHREALTIME - $start)")"
start=$EPOCHREALTIME
uv venv --quiet --python {CONTAINER_PYTHON} /tmp/uv-env
uv pip install --quiet --python /tmp/uv-env/bin/python --only-binary=:all: opkiln \\
  --find-links {shlex.quote(url + page)} {sources}
/tmp/uv-env/bin/python -c {exercise} {samples} > /tmp/uv.json
echo "UVSO $(sha256sum /tmp/uv-env/lib/python3*/site-packages/opkiln/_C*.so | cut -d' ' -f1)"
echo "UV $(cat /tmp/uv.json) SECONDS $(python3 -c "print($EPOCHREALTIME - $start)")"
"""


def _uv_sources() -> list[str]:
    """uv reads no pip configuration: the same local sources, as uv options."""
    args: list[str] = []
    env = host_pip_sources()
    for item in env.get("PIP_FIND_LINKS", "").split():
        args += ["--find-links", item]
    for item in env.get("PIP_EXTRA_INDEX_URL", "").split():
        args += ["--extra-index-url", item]
    return args


def _published_extension_sha256(wheel: Path) -> str:
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        (member,) = [n for n in archive.namelist() if n.startswith("opkiln/_C") and n.endswith(".so")]
        return hashlib.sha256(archive.read(member)).hexdigest()


def install_as_user(engine: Engine, base: Base, uv: Path, url: str, wheel: str, page: str, log: Path,
                    say: Say, published_wheel: Path) -> list[InstallResult]:
    env_args: list[str] = []
    for key, value in host_pip_sources().items():
        env_args += ["-e", f"{key}={value}"]
    mounts = [item for m in _pip_mounts() for item in ("-v", m)]
    name = f"opkiln-rehearsal-{os.getpid()}-{int(time.time())}"
    args = ["run", "--rm", "--name", name, "--network=host", *mounts, "-v", f"{uv}:/usr/local/bin/uv:ro",
            *env_args, "-e", "UV_CACHE_DIR=/tmp/uv-cache", base.runtime_image,
            "/bin/bash", "-c", _install_script(url, page, _uv_sources())]
    say(f"rehearsal: {wheel}: pip and uv install opkiln -f {url}{page} in a fresh {base.runtime_image}")
    started = time.monotonic()
    try:
        out = docker(engine, *args, capture=True, timeout=1800)
    except ContainerError as exc:
        with log.open("a") as fh:
            fh.write(str(exc) + "\n")
        raise ContainerError(f"installing {wheel} from {url}{page} as a user would failed: {exc}") from None
    with log.open("a") as fh:
        fh.write(out)
    results = []
    published = _published_extension_sha256(published_wheel)
    for line in out.splitlines():
        kind, _, rest = line.partition(" ")
        if kind in ("PIPSO", "UVSO") and rest.strip() != published:
            raise ContainerError(f"{kind[:-2].lower()} installed an opkiln/_C whose sha256 {rest.strip()} is not "
                                 f"the published wheel's {published}")
        if kind in ("PIP", "UV"):
            data, _, seconds = rest.rpartition(" SECONDS ")
            results.append(InstallResult(wheel, page, kind.lower(), float(seconds or 0), json.loads(data)))
    if {r.installer for r in results} != {"pip", "uv"}:
        raise ContainerError(f"the install of {wheel} printed no result for pip and uv; see {log}")
    for r in results:
        say(f"rehearsal:   {r.installer}: opkiln {r.output.get('version')} on torch {r.output.get('torch')}, "
            f"{len(r.output.get('results', {}))} op(s) called, {r.seconds:.0f} s")  # type: ignore[arg-type]
    say(f"rehearsal:   both installed the published opkiln/_C (sha256 {published[:16]}...); container run "
        f"{time.monotonic() - started:.0f} s")
    return results


def rehearse(engine: Engine, base: Base, wheels: Path, rebuilt: Path, work: Path, uv: Path, log: Path,
             say: Say = print) -> dict[str, object]:
    """Run the rehearsal; raises ContainerError on any failure. `rebuilt`: a folder with a rebuilt wheel."""
    if work.exists():
        shutil.rmtree(work)
    published = work / "published"
    published.mkdir(parents=True)
    assets = work / "release-assets"
    assets.mkdir()
    summary: dict[str, object] = {}
    with serve(published) as url, serve(assets) as assets_url:
        say(f"rehearsal: the published site is served at {url} (empty: nothing published yet); release assets "
            f"(stand-in gh) at {assets_url}")
        gh = stand_in_gh(work, assets, assets_url)
        started = time.monotonic()
        try:
            first = run_release(wheels, work / "site-1", url, url, first_release=True, say=say,
                                repository=REPOSITORY, tag="v0.0.0-rehearsal.1", gh=gh)
        except ReleaseError as exc:
            raise ContainerError(f"the release path failed at {exc}") from None
        if (work / "site-1" / "wheels").exists() or len(first.uploaded) != len(first.added):
            raise ContainerError("the release left wheels in the site instead of uploading them as release assets")
        stored = assets / REPOSITORY / "releases" / "download" / "v0.0.0-rehearsal.1"
        deploy(work / "site-1", published)
        summary["release_seconds"] = round(time.monotonic() - started, 1)
        summary["added"] = list(first.added)
        installs = []
        for wheel, page in sorted(_pages(published).items()):
            installs += install_as_user(engine, base, uv, url, wheel, page, log, say, stored / wheel)
        summary["installs"] = [{"wheel": r.wheel, "page": r.page, "installer": r.installer,
                                "seconds": round(r.seconds, 1), "torch": r.output.get("torch"),
                                "version": r.output.get("version")} for r in installs]
        before = tree_digest(published) | tree_digest(assets)
        try:
            run_release(rebuilt, work / "site-2", url, url, first_release=False, say=say, repository=REPOSITORY,
                        tag="v0.0.0-rehearsal.2", gh=gh)
        except ReleaseError as exc:
            if exc.exit_code != 1 or exc.step != "index":
                raise ContainerError(f"the rebuilt wheel was refused for the wrong reason: {exc}") from None
            say(f"rehearsal: the rebuilt wheel is refused as it must be: {exc}")
            summary["rebuilt_refused"] = str(exc)
        else:
            raise ContainerError("the release path accepted a rebuilt wheel under a published name")
        if tree_digest(published) | tree_digest(assets) != before:
            raise ContainerError("the published site or its release assets changed although the rebuilt wheel "
                                 "was refused")
        summary["site_unchanged"] = True
    return summary
