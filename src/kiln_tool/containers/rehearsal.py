"""The release rehearsal: the release path on real cibuildwheel wheels, then installs as a user would.

1. `kiln release` (the same code release.yml runs) on the wheels of `kiln cibuildwheel`: the torch
   ABIs, the release audit, the fetch of the published manifest (served by a real HTTP server on
   127.0.0.1, empty at first), the upload of the wheels as release assets through the same gh
   interface (kiln_tool.index.storage.GhCli) running the stand-in gh (tools/fake_gh.py; no GitHub
   here), its assets served by a second HTTP server, and the merge; the pages are "deployed" to the
   first server, and link the wheels on the second.
2. For each wheel, in a fresh container of the runtime image (no compiler, no build tools; the host's
   network, so 127.0.0.1 is the server), `pip install <project> -f <its combination's page>` and
   `uv pip install <project> -f <page>` into new venvs, each resolving torch itself from the package
   sources this machine has; then the import, every op of the build manifest registered, and each of the
   project's install samples (kiln_tool.op_smoke); the installed libraries are the published bytes. Where
   the site has another combination (another torch), its wheel is then forced into the same venv: the
   import guard must refuse it and name this combination's page, of the project's index-url and, with the
   guard's <PACKAGE>_INDEX_URL set, of the served site.
3. A rebuilt wheel of the same version (another SOURCE_DATE_EPOCH, so other bytes under a published
   name) goes through the same release path: refused, and the published site is byte-identical.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import re
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

from ..index.combos import Combination
from ..index.storage import GhCli
from ..op_smoke import EXERCISE, exercise_args
from ..project import KilnProject
from ..release import ReleaseError, run_release
from .cibw import HOST_MOUNT, host_pip_sources
from .engine import ContainerError, Engine, docker, scratch_tmpfs_args
from .images import Base

Say = Callable[[str], None]
CONTAINER_PYTHON = "/opt/python/cp311-cp311/bin/python"
# Inside the throwaway container the install script runs in (no other user there).
PIP_ENV, UV_ENV = "/tmp/pip-env", "/tmp/uv-env"  # noqa: S108
REPO = Path(__file__).resolve().parents[3]


def stand_in_repository(project: KilnProject) -> str:
    """The GitHub repository the stand-in gh stores the project's release assets under (no GitHub here)."""
    return f"{project.name}/{project.name}"


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
    """wheel file name -> its first combination's find-links page (a folder, relative), from the manifest."""
    manifest = json.loads((site / "kiln-index.json").read_text())
    pages = {}
    for entry in manifest["wheels"]:
        combo = entry["combos"][0]
        pages[entry["filename"]] = Combination(combo["torch"], combo["cuda"]).page.removesuffix("index.html")
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


@dataclass(frozen=True)
class Mismatch:
    """Another combination's published wheel, installed without its dependencies into a venv whose torch is
    this combination's: the import guard must refuse it and name this combination's page of the site."""

    wheel_url: str
    wheel: str


def _libraries_of(env: str, package: str) -> str:
    """Shell: one `SO <path> <sha256>` line per library of the installed package (its folder and its grafts)."""
    return (f'(cd {env}/lib/python3*/site-packages && for d in {package} {package}.libs; do '
            'if [ -d "$d" ]; then find "$d" -type f -name "*.so*"; fi; done | LC_ALL=C sort | '
            'while read -r f; do echo "SO $f $(sha256sum "$f" | cut -d" " -f1)"; done)')


def _install_script(project: KilnProject, url: str, page: str, uv_sources: list[str],
                    mismatch: Mismatch | None) -> str:
    exercise = shlex.quote(EXERCISE)
    args = " ".join(shlex.quote(a) for a in exercise_args(project))
    sources = " ".join(shlex.quote(s) for s in uv_sources)
    name, package = shlex.quote(project.name), shlex.quote(project.package)
    script = f"""set -euo pipefail
for tool in gcc cc c++ g++ nvcc make cmake; do
  if command -v "$tool" >/dev/null; then
    echo "rehearsal: this image has $tool: not a fresh user machine" >&2
    exit 3
  fi
done
start=$EPOCHREALTIME
{CONTAINER_PYTHON} -m venv /tmp/pip-env
/tmp/pip-env/bin/python -m pip install --quiet --only-binary=:all: {name} -f {shlex.quote(url + page)}
/tmp/pip-env/bin/python -c {exercise} {args} > /tmp/pip.json
{_libraries_of(PIP_ENV, package)} | sed 's/^SO /PIPSO /'
echo "PIP $(cat /tmp/pip.json) SECONDS $(python3 -c "print($EPOCHREALTIME - $start)")"
rm -rf /tmp/pip-env  # checked: its room (4.6 GB for a CUDA torch) goes to uv's cache and venv
start=$EPOCHREALTIME
uv venv --quiet --python {CONTAINER_PYTHON} /tmp/uv-env
uv pip install --quiet --python /tmp/uv-env/bin/python --only-binary=:all: {name} \\
  --find-links {shlex.quote(url + page)} {sources}
/tmp/uv-env/bin/python -c {exercise} {args} > /tmp/uv.json
{_libraries_of(UV_ENV, package)} | sed 's/^SO /UVSO /'
echo "UV $(cat /tmp/uv.json) SECONDS $(python3 -c "print($EPOCHREALTIME - $start)")"
"""
    if mismatch is not None:
        # Twice: as installed (the message names the project's index-url), and with the guard's mirror variable
        # set to this served site (it names the served page).
        script += f"""uv pip install --quiet --python /tmp/uv-env/bin/python --no-deps --reinstall \\
  {shlex.quote(mismatch.wheel_url)}
for run in plain mirror; do
  if [ "$run" = mirror ]; then export {guard_variable(project, "INDEX_URL")}={shlex.quote(url)}; fi
  if /tmp/uv-env/bin/python -c "import {project.package}" 2>/tmp/mismatch.txt; then
    echo "MISMATCH-IMPORTED"
  else
    echo "MISMATCH $run $(python3 -c 'import json,sys; print(json.dumps(open(sys.argv[1]).read()))' /tmp/mismatch.txt)"
  fi
done
"""
    return script


def _uv_sources() -> list[str]:
    """uv reads no pip configuration: the same local sources, as uv options."""
    args: list[str] = []
    env = host_pip_sources()
    for item in env.get("PIP_FIND_LINKS", "").split():
        args += ["--find-links", item]
    for item in env.get("PIP_EXTRA_INDEX_URL", "").split():
        args += ["--extra-index-url", item]
    return args


def _published_libraries(wheel: Path, package: str) -> dict[str, str]:
    """path -> sha256 of each library of the package in the published wheel (its folder and its grafts)."""
    import zipfile

    libraries = {}
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            top = info.filename.split("/", 1)[0]
            if top in (package, f"{package}.libs") and ".so" in info.filename.rsplit("/", 1)[-1] \
                    and not info.is_dir():
                libraries[info.filename] = hashlib.sha256(archive.read(info)).hexdigest()
    return libraries


def guard_variable(project: KilnProject, name: str) -> str:
    """An environment variable of the project's import guard: the package's name upper-cased, then `_NAME`."""
    return f"{project.package.upper()}_{name}"


def _mismatch_problem(project: KilnProject, message: str, url: str, page: str, mismatch: Mismatch) -> str | None:
    """Why the guard's message for a mismatched install is not what a user needs, or None when it is."""
    # The guard's own error (an ImportError subclass whose headline says the package cannot be imported), not a
    # loader error or another exception.
    if not re.search(rf"^[\w.]*Error: {re.escape(project.package)} cannot be imported", message, flags=re.M):
        return (f"the import of {project.package} with {mismatch.wheel} beside this torch did not end in its "
                f"import guard's error:\n{message[-2000:]}")
    # Its fix is one command a user pastes: parsed back as a shell would, it installs the project from the page.
    for line in message.splitlines():
        if "pip install" not in line:
            continue
        try:
            args = shlex.split(line[line.index("pip install"):])
        except ValueError:
            continue
        pages = {url + page, url + page + "index.html"} if page.endswith("/") else {url + page}
        if args[:2] == ["pip", "install"] and project.name in args[2:] and pages & set(args[2:]):
            return None
    return (f"the import guard's message for {mismatch.wheel} installed beside this page's torch has no fix that "
            f"installs {project.name} from {url + page}:\n{message[-2000:]}")


def install_as_user(engine: Engine, base: Base, uv: Path, url: str, wheel: str, page: str, log: Path,
                    say: Say, published_wheel: Path, project: KilnProject,
                    mismatch: Mismatch | None = None) -> list[InstallResult]:
    env_args: list[str] = []
    for key, value in host_pip_sources().items():
        env_args += ["-e", f"{key}={value}"]
    mounts = [item for m in _pip_mounts() for item in ("-v", m)]
    name = f"kiln-rehearsal-{project.name}-{os.getpid()}-{int(time.time())}"
    script = _install_script(project, url, page, _uv_sources(), mismatch)
    # /tmp (both venvs and uv's cache) on a tmpfs where memory allows, as cibuildwheel's scratch folder.
    args = ["run", "--rm", "--name", name, "--network=host", *scratch_tmpfs_args(), *mounts,
            "-v", f"{uv}:/usr/local/bin/uv:ro", *env_args, "-e", "UV_CACHE_DIR=/tmp/uv-cache", base.runtime_image,
            "/bin/bash", "-c", script]
    say(f"rehearsal: {wheel}: pip and uv install {project.name} -f {url}{page} in a fresh {base.runtime_image}")
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
    published = _published_libraries(published_wheel, project.package)
    if not published:
        raise ContainerError(f"{wheel} holds no library of {project.package}")
    installed: dict[str, dict[str, str]] = {"PIPSO": {}, "UVSO": {}}
    for line in out.splitlines():
        kind, _, rest = line.partition(" ")
        if kind in installed:
            path, _, digest = rest.strip().rpartition(" ")
            installed[kind][path] = digest
        if kind in ("PIP", "UV"):
            data, _, seconds = rest.rpartition(" SECONDS ")
            results.append(InstallResult(wheel, page, kind.lower(), float(seconds or 0), json.loads(data)))
        if kind == "MISMATCH-IMPORTED" and mismatch is not None:
            raise ContainerError(f"{mismatch.wheel} imported beside the torch of {page}: the import guard let "
                                 "a mismatched build through")
        if kind == "MISMATCH" and mismatch is not None:
            run, _, text = rest.partition(" ")
            base_url = url if run == "mirror" else (project.index_url or "").rstrip("/") + "/"
            if run == "plain" and not project.index_url:
                continue  # the project names no index-url: only the mirror run can name a page
            problem = _mismatch_problem(project, json.loads(text), base_url, page, mismatch)
            if problem:
                raise ContainerError(problem)
            say(f"rehearsal:   {mismatch.wheel} beside this torch: the import guard refuses it and names "
                f"{base_url}{page}" + (f" ({guard_variable(project, 'INDEX_URL')} set)" if run == "mirror" else ""))
    for kind, libraries in installed.items():
        if libraries != published:
            raise ContainerError(f"{kind[:-2].lower()} installed libraries {sorted(libraries.items())} that are not "
                                 f"the published wheel's {sorted(published.items())}")
    if {r.installer for r in results} != {"pip", "uv"}:
        raise ContainerError(f"the install of {wheel} printed no result for pip and uv; see {log}")
    if mismatch is not None and "MISMATCH" not in out:
        raise ContainerError(f"the mismatched install of {mismatch.wheel} printed no result; see {log}")
    for r in results:
        say(f"rehearsal:   {r.installer}: {project.name} {r.output.get('version')} on torch "
            f"{r.output.get('torch')}, {len(r.output.get('ops', []))} op(s) registered, "  # type: ignore[arg-type]
            f"{len(r.output.get('results', {}))} sample(s) called, {r.seconds:.0f} s")  # type: ignore[arg-type]
    say(f"rehearsal:   both installed the published libraries ({len(published)}: "
        f"{', '.join(f'{p} {d[:12]}...' for p, d in sorted(published.items()))}); container run "
        f"{time.monotonic() - started:.0f} s")
    return results


def _mismatches(manifest: dict[str, object], pages: dict[str, str]) -> dict[str, Mismatch]:
    """wheel -> another combination's published wheel (another torch) to install beside this wheel's torch."""
    entries = {e["filename"]: e for e in manifest["wheels"]}  # type: ignore[attr-defined]
    found: dict[str, Mismatch] = {}
    for wheel, page in sorted(pages.items()):
        others = [w for w, p in sorted(pages.items()) if p != page and entries[w].get("url")]
        if others:
            found[wheel] = Mismatch(wheel_url=entries[others[0]]["url"], wheel=others[0])
    return found


def rehearse(engine: Engine, base: Base, wheels: Path, rebuilt: Path, work: Path, uv: Path, log: Path,
             project: KilnProject, say: Say = print) -> dict[str, object]:
    """Run the rehearsal; raises ContainerError on any failure. `rebuilt`: a folder with a rebuilt wheel."""
    repository = stand_in_repository(project)
    # The release assets of the stand-in gh, whatever storage the project names for its real releases.
    storage = work.parent / "rehearsal-storage.json"
    if work.exists():
        shutil.rmtree(work)
    published = work / "published"
    published.mkdir(parents=True)
    assets = work / "release-assets"
    assets.mkdir()
    storage.write_text(json.dumps({"backend": "github-release", "metadata": True}) + "\n")
    summary: dict[str, object] = {}
    with serve(published) as url, serve(assets) as assets_url:
        say(f"rehearsal: the published site is served at {url} (empty: nothing published yet); release assets "
            f"(stand-in gh) at {assets_url}")
        gh = stand_in_gh(work, assets, assets_url)
        started = time.monotonic()
        try:
            first = run_release(wheels, work / "site-1", url, url, first_release=True, say=say,
                                repository=repository, tag="v0.0.0-rehearsal.1", gh=gh, storage_config=storage,
                                allow_dirty=True)
        except ReleaseError as exc:
            raise ContainerError(f"the release path failed at {exc}") from None
        if (work / "site-1" / "wheels").exists() or len(first.uploaded) != len(first.added):
            raise ContainerError("the release left wheels in the site instead of uploading them as release assets")
        stored = assets / repository / "releases" / "download" / "v0.0.0-rehearsal.1"
        deploy(work / "site-1", published)
        summary["release_seconds"] = round(time.monotonic() - started, 1)
        summary["added"] = list(first.added)
        installs = []
        pages = _pages(published)
        mismatches = _mismatches(json.loads((published / "kiln-index.json").read_text()), pages)
        for wheel, page in sorted(pages.items()):
            installs += install_as_user(engine, base, uv, url, wheel, page, log, say, stored / wheel, project,
                                        mismatches.get(wheel))
        summary["mismatched_imports_refused"] = len(mismatches)
        summary["installs"] = [{"wheel": r.wheel, "page": r.page, "installer": r.installer,
                                "seconds": round(r.seconds, 1), "torch": r.output.get("torch"),
                                "version": r.output.get("version")} for r in installs]
        before = tree_digest(published) | tree_digest(assets)
        try:
            run_release(rebuilt, work / "site-2", url, url, first_release=False, say=say, repository=repository,
                        tag="v0.0.0-rehearsal.2", gh=gh, storage_config=storage, allow_dirty=True)
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
