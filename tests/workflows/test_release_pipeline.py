"""The release path of the workflows, run here: cibuildwheel's repair-wheel-command, then release.yml's
`kiln release` step (torch ABIs, release audit, fetch of the published manifest, upload of the wheels as
release assets, merge), with the published site served over loopback HTTP and a stand-in `gh`
(tools/fake_gh.py, not GitHub's CLI) keeping the release assets in a folder served by a second server.

GitHub-only steps (Pages deployment, attestations) are left out; every repo script the
index job calls runs here as written. `make release-rehearsal` runs the same `kiln release` on real
cibuildwheel wheels and installs them with pip and uv (docs/containers.md).
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from index.synthetic_wheels import reversion, rezip
from workflows.workflow_files import REPO, run_scripts, steps

FETCH = REPO / "tools" / "fetch_published_site.py"


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def serve() -> Iterator[object]:
    """serve(directory) -> base URL of a loopback HTTP server for that directory (one per call)."""
    servers: list[http.server.ThreadingHTTPServer] = []

    def start(directory: Path) -> str:
        handler = lambda *a, **kw: _Quiet(*a, directory=str(directory), **kw)  # noqa: E731
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _workspace(tmp: Path, wheels: list[Path]) -> Path:
    """A checkout as the release job sees it: the repo's scripts, tools, data and [tool.kiln] (pyproject.toml),
    and dist/ of wheels."""
    tmp.mkdir(parents=True)
    for name in ("scripts", "tools", "data"):
        (tmp / name).symlink_to(REPO / name)
    for name in ("pyproject.toml", "VERSION"):  # copies: kiln refuses a version file that lies outside the project
        shutil.copy2(REPO / name, tmp / name)
    (tmp / "dist").mkdir()
    for wheel in wheels:
        shutil.copy2(wheel, tmp / "dist" / wheel.name)
    return tmp


def _without_directory_entries(wheel: Path, directory: Path) -> Path:
    """The same wheel minus zip directory entries (auditwheel writes them; `reversion` would list them in RECORD)."""
    directory.mkdir(parents=True, exist_ok=True)
    out = directory / wheel.name
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            if not info.is_dir():
                dst.writestr(info, src.read(info))
    return out


RELEASE_STEP = 'kiln -C "$PROJECT_DIR" release'


def _release_step(fragment: str) -> str:
    """The step of kiln.yml's index job (the reusable workflow release.yml calls) that runs `fragment`."""
    matches = [s.get("run", "") for wf, job, s in steps()
               if wf == "kiln.yml" and job == "index" and fragment in s.get("run", "")]
    assert len(matches) == 1, f"kiln.yml's index job has {len(matches)} steps running {fragment!r}"
    return str(matches[0])


def _step_env(workspace: Path, bin_dir: Path) -> dict[str, str]:
    """What the index job gives its step: release.yml's inputs (the project at the root, data/storage.json),
    the runner's temp folder (here the workspace: dist/ in, site/ out), and `kiln` on PATH (this tree's)."""
    shim = bin_dir / "kiln"
    if not shim.exists():
        shim.write_text(f"#!/bin/sh\nexec {sys.executable} {REPO / 'scripts' / 'kiln'} \"$@\"\n")
        shim.chmod(0o755)
    return {"PROJECT_DIR": str(workspace), "STORAGE": "data/storage.json", "RUNNER_TEMP": str(workspace)}


def _bash(script: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PATH": path, **env})


def _fetch(url: str, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(FETCH), url, str(out), *extra], capture_output=True, text=True)


# This machine's glibc (2.36, like the stand-in base of `kiln cibuildwheel`) gives manylinux_2_34 wheels: the
# release audit holds them to that one tag when told so, and to the release floor otherwise.
STANDIN = {"KILN_STANDIN_MANYLINUX": "manylinux_2_34"}


def _repair_command(cpu_wheel: Path, tmp: Path) -> tuple[str, Path]:
    """pyproject's repair-wheel-command, as cibuildwheel runs it: kiln repair, then kiln audit --release."""
    (command,) = [text for where, text in run_scripts() if where.endswith("repair-wheel-command")]
    (tmp / "in").mkdir(parents=True)
    wheel = shutil.copy2(cpu_wheel, tmp / "in" / cpu_wheel.name)
    for key, value in {"{project}": str(REPO), "{wheel}": str(wheel), "{dest_dir}": str(tmp / "out")}.items():
        command = command.replace(key, value)
    return command, tmp / "out"


@pytest.fixture(scope="module")
def repaired_wheel(cpu_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    command, out = _repair_command(cpu_wheel, tmp_path_factory.mktemp("repair"))
    result = _bash(command, cwd=out.parent, **STANDIN)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "STAND-IN run" in result.stderr and "none of them is a release wheel" in result.stderr
    produced = sorted(out.glob("*.whl"))
    assert len(produced) == 1
    assert produced[0].name.endswith("-manylinux_2_34_x86_64.whl")
    return produced[0]


@pytest.mark.parametrize(("env", "finding"), [
    ({}, "must be tagged at the release floor manylinux_2_28"),
    ({"KILN_STANDIN_MANYLINUX": "manylinux_2_31"}, "built in a STAND-IN base that gives manylinux_2_31"),
])
def test_the_repair_command_fails_a_wheel_above_the_release_floor(cpu_wheel: Path, tmp_path: Path,
                                                                  env: dict[str, str], finding: str) -> None:
    """A wheel tagged above data/matrix.json's manylinux_floor fails the wheels workflow (its repair-wheel-command),
    and a stand-in run asserts exactly the tag its base gives."""
    command, _ = _repair_command(cpu_wheel, tmp_path)
    result = _bash(command, cwd=tmp_path, **env)
    assert result.returncode == 1, result.stdout + result.stderr
    assert finding in " ".join(result.stdout.split())


def _fake_gh(tmp: Path, serve: object) -> Path:
    """The stand-in gh (tools/fake_gh.py) on PATH: the Pages URL, how many other releases exist, and release
    assets kept in tmp/assets, served by their own loopback server (FAKE_GH_* in the environment)."""
    bin_dir = tmp / "bin"
    subprocess.run([sys.executable, str(REPO / "tools" / "fake_gh.py"), "install", str(bin_dir)], check=True)
    (tmp / "assets").mkdir(parents=True)
    os.environ["FAKE_GH_ROOT"] = str(tmp / "assets")
    os.environ["FAKE_GH_DOWNLOAD_URL"] = serve(tmp / "assets")  # type: ignore[operator]
    return bin_dir


@pytest.fixture(autouse=True)
def _no_fake_gh_leaks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FAKE_GH_ROOT", raising=False)  # restored after each test, set by _fake_gh
    monkeypatch.delenv("FAKE_GH_DOWNLOAD_URL", raising=False)


def _release(workspace: Path, url: str, earlier: int, bin_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """release.yml's index job step, as written, with the stand-in `gh` answering for GitHub."""
    script = _release_step(RELEASE_STEP)
    path = f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=workspace, capture_output=True, text=True,
                          env={**os.environ, **STANDIN, **_step_env(workspace, bin_dir), "PATH": path,
                               "GITHUB_REPOSITORY": "opkiln/opkiln", "TAG": "v0.1.0", "FAKE_PAGES_URL": url,
                               "FAKE_EARLIER_RELEASES": str(earlier),
                               "KILN_SIGNING_STANDIN_KEY": _signing_key(bin_dir), **env})


def _signing_key(folder: Path) -> str:
    """The key that stands in for keyless signing (no OIDC identity nor sigstore service here)."""
    key = folder / "signing-standin"
    if not key.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True, timeout=60)
    return str(key)


def _assets(tag: str) -> dict[str, bytes]:
    folder = Path(os.environ["FAKE_GH_ROOT"]) / "opkiln" / "opkiln" / "releases" / "download" / tag
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if not p.name.startswith(".")}


def test_release_merges_onto_what_is_published(repaired_wheel: Path, serve: object, tmp_path: Path) -> None:
    start = serve  # type: ignore[assignment]
    bin_dir = _fake_gh(tmp_path / "gh", serve)

    # First release: nothing published yet (404). Only the first release may start from an empty site.
    nothing = tmp_path / "nothing-published"
    nothing.mkdir()
    url = start(nothing)  # type: ignore[operator]
    refused = _release(_workspace(tmp_path / "not-first", [repaired_wheel]), url, 3, bin_dir)
    assert refused.returncode == 1 and "--allow-missing" in refused.stderr, refused.stdout + refused.stderr
    first = _workspace(tmp_path / "first", [repaired_wheel])
    result = _release(first, url, 0, bin_dir)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "pass the release audit" in result.stdout
    published = first / "site"
    manifest = json.loads((published / "kiln-index.json").read_text())
    assert [w["filename"] for w in manifest["wheels"]] == [repaired_wheel.name]
    # The wheel is an asset of v0.1.0 (with its METADATA), read back and linked; the site holds no wheel. The
    # signed release manifest (the workflow's keyless signer: a key stands in here) lies beside it and in the site.
    assets = _assets("v0.1.0")
    assert sorted(assets) == sorted([repaired_wheel.name, f"{repaired_wheel.name}.metadata", "release-000001.json",
                                     "release-000001.json.sig"])
    assert assets["release-000001.json"] == (published / "releases" / "release-000001.json").read_bytes()
    assert assets[repaired_wheel.name] == repaired_wheel.read_bytes()
    metadata_sha256 = hashlib.sha256(assets[f"{repaired_wheel.name}.metadata"]).hexdigest()
    assert metadata_sha256 == manifest["wheels"][0]["metadata_sha256"]
    assert manifest["wheels"][0]["url"].startswith(os.environ["FAKE_GH_DOWNLOAD_URL"])
    assert not (published / "wheels").exists()

    # Second release: fetch the published manifest alone, add a newer wheel as an asset of v0.2.0; the published
    # entry and asset stay byte for byte.
    version = repaired_wheel.name.split("-")[1]
    plain = _without_directory_entries(repaired_wheel, tmp_path / "plain")
    newer = reversion(plain, tmp_path / "newer", version.replace(version.split("+")[0], "9.9.9"))
    second = _workspace(tmp_path / "second", [newer])
    url = start(published)  # type: ignore[operator]
    assets_before = _assets("v0.1.0")
    result = _release(second, url, 1, bin_dir, TAG="v0.2.0")
    assert result.returncode == 0, result.stdout + result.stderr
    manifest_bytes = (published / "kiln-index.json").stat().st_size
    assert (f"fetched 0 published wheel(s) from {url} ({manifest_bytes} bytes; 1 listed wheel(s) live in storage"
            in result.stdout), result.stdout
    assert "checked 1 stored wheel(s) against the storage's own listing of github-release:opkiln/opkiln@v0.1.0" \
        in result.stdout
    merged = second / "site"
    entries = {w["filename"]: w for w in json.loads((merged / "kiln-index.json").read_text())["wheels"]}
    assert sorted(entries) == sorted([repaired_wheel.name, newer.name])
    assert entries[repaired_wheel.name] == manifest["wheels"][0]
    assert entries[newer.name]["stored_at"] == "github-release:opkiln/opkiln@v0.2.0"
    assert _assets("v0.1.0") == assets_before and newer.name in _assets("v0.2.0")
    assert not (merged / "wheels").exists()
    # SITE is deployed whole (a Pages deployment replaces the site): every page is there, not only the changed ones.
    pages = {p.relative_to(published) for p in published.rglob("*.html")}
    assert pages <= {p.relative_to(merged) for p in merged.rglob("*.html")}, "a deployed release drops pages"

    # A rebuilt wheel under a published name: the release refuses it, and the site it fetched is left as it was.
    served = start(merged)  # type: ignore[operator]
    third = _workspace(tmp_path / "third", [rezip(repaired_wheel, tmp_path / "rebuilt")])
    result = _release(third, served, 2, bin_dir, TAG="v0.3.0")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "a published wheel is never replaced" in result.stderr
    fetched = {p.relative_to(third / "site"): p.read_bytes() for p in (third / "site").rglob("*") if p.is_file()}
    assert fetched == {p.relative_to(merged): p.read_bytes() for p in merged.rglob("*")
                       if p.is_file() and p.relative_to(merged) in fetched}
    assert fetched[Path("kiln-index.json")] == (merged / "kiln-index.json").read_bytes()
    assert _assets("v0.1.0") == assets_before, "the published asset is never replaced"

    # A wheel above the release floor never reaches the fetch: the audit stops the release first.
    fourth = _workspace(tmp_path / "fourth", [newer])
    path = f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    script = _release_step(RELEASE_STEP)
    env = {k: v for k, v in os.environ.items() if k != "KILN_STANDIN_MANYLINUX"}
    above = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=fourth, capture_output=True, text=True,
                           env={**env, **_step_env(fourth, bin_dir), "PATH": path,
                                "KILN_SIGNING_STANDIN_KEY": _signing_key(bin_dir),
                                "GITHUB_REPOSITORY": "opkiln/opkiln", "TAG": "v9.9.9",
                                "FAKE_PAGES_URL": served, "FAKE_EARLIER_RELEASES": "2"})
    assert above.returncode == 1, above.stdout + above.stderr
    assert "release floor manylinux_2_28" in " ".join(above.stdout.split())
    assert not (fourth / "site").exists()


# -- tools/fetch_published_site.py on its own ------------------------------------------------------


def test_fetch_checks_every_file_against_the_manifest(serve: object, tmp_path: Path) -> None:
    start = serve  # type: ignore[assignment]
    from index.synthetic_wheels import make_wheel  # the fetch reads a kiln manifest strictly (issue 34)
    from kiln_tool.index import build_index

    a, b = (make_wheel(tmp_path / "dist", version=v) for v in ("0.1.0+pt213cpu", "0.2.0+pt213cpu"))
    site = build_index(tmp_path / "dist", tmp_path / "site", audit=None).out
    url = start(site)  # type: ignore[operator]
    ok = _fetch(url, tmp_path / "ok")
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "ok" / "wheels" / b.name).read_bytes() == b.read_bytes()
    assert (tmp_path / "ok" / "kiln-index.json").read_bytes() == (site / "kiln-index.json").read_bytes()

    (site / "wheels" / b.name).write_bytes(b.read_bytes()[:-1] + b"X")  # same size, other bytes
    tampered = _fetch(url, tmp_path / "tampered")
    assert tampered.returncode == 1 and "sha256 differs" in tampered.stderr
    (site / "wheels" / f"{a.name}.metadata").unlink()
    gone = _fetch(url, tmp_path / "gone")
    assert gone.returncode == 1 and "HTTP 404" in gone.stderr


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        ({"wheels": [{"filename": "../../etc/x.whl", "sha256": "0" * 64, "size": 1, "metadata_sha256": "0" * 64}]},
         "is not a wheel file name"),
        ({"wheels": [{"filename": "a-1-py3-none-any.whl"}]}, "lacks filename"),
        ({"wheels": "none"}, "'wheels' list"),
    ],
)
def test_fetch_refuses_a_malformed_manifest(serve: object, tmp_path: Path, manifest: object, message: str) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "kiln-index.json").write_text(json.dumps(manifest))
    result = _fetch(serve(site), tmp_path / "out")  # type: ignore[operator]
    assert result.returncode == 2 and message in result.stderr


def test_fetch_wants_an_empty_target_and_an_http_url(tmp_path: Path) -> None:
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("x")
    assert _fetch("http://127.0.0.1:9/", tmp_path / "busy").returncode == 2
    assert _fetch("file:///etc/", tmp_path / "new").returncode == 2



def test_release_audits_wheels_of_torches_that_are_not_installed(repaired_wheel: Path, cuda_wheel: Path,
                                                                 serve: object, tmp_path: Path) -> None:
    """release.yml's index job has only requirements/dev.txt's torch (2.13 CPU): the CUDA 13.0 wheel built
    for torch 2.14.1 is audited (by the release audit and inside the merge) against the recorded torch ABI."""
    start = serve  # type: ignore[assignment]
    bin_dir = _fake_gh(tmp_path / "gh", serve)
    audit = "python scripts/kiln audit dist/*.whl"
    only_dev_torch = {"KILN_AUDIT_TORCH_SEARCH": "interpreter"}
    nothing = tmp_path / "nothing-published"
    nothing.mkdir()
    url = start(nothing)  # type: ignore[operator]

    command, out = _repair_command(cuda_wheel, tmp_path / "repair-cuda")  # as cibuildwheel's repair step
    repaired = _bash(command, cwd=out.parent, **STANDIN)
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    (cuda_release_wheel,) = sorted(out.glob("*.whl"))
    workspace = _workspace(tmp_path / "release", [repaired_wheel, cuda_release_wheel])
    released = _release(workspace, url, 0, bin_dir, **only_dev_torch)
    assert released.returncode == 0, released.stdout + released.stderr
    # Every torch these wheels need is recorded in the repo: the record step downloads nothing.
    assert "every target torch is recorded or installed" in released.stdout
    text = " ".join(released.stdout.split())
    assert "2 wheel(s) pass the release audit" in text
    listed = {w["filename"] for w in json.loads((workspace / "site" / "kiln-index.json").read_text())["wheels"]}
    assert listed == {repaired_wheel.name, cuda_release_wheel.name}
    audited = _bash(audit, workspace, **only_dev_torch)
    assert audited.returncode == 0, audited.stdout + audited.stderr
    assert "torch: 2.14.1+cu130 as recorded in torch_abi/2.14.1+cu130.json" in " ".join(audited.stdout.split())

    # Without the records the same wheel cannot be checked, and the audit says exactly that.
    bare = _workspace(tmp_path / "no-records", [cuda_wheel])
    (empty := tmp_path / "empty-records").mkdir()
    refused = _bash(audit, bare, **only_dev_torch, KILN_TORCH_ABI_DIR=str(empty))
    assert refused.returncode == 1, refused.stdout + refused.stderr
    text = " ".join(refused.stdout.split())
    assert "neither installed here nor recorded" in text and "torch 2.14.1+cu130" in text
