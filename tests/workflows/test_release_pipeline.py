"""The release path of the workflows, run here: cibuildwheel's repair-wheel-command, then release.yml's
audit, fetch of the published site and `kiln index` merge, with the site served over loopback HTTP.

GitHub-only steps (gh, Pages, attestations) are left out; every repo script they call runs here as written.
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
    """A checkout as the release job sees it: the repo's scripts, tools and data, and dist/ of wheels."""
    tmp.mkdir(parents=True)
    for name in ("scripts", "tools", "data"):
        (tmp / name).symlink_to(REPO / name)
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


def _release_step(fragment: str) -> str:
    matches = [s.get("run", "") for wf, _, s in steps() if wf == "release.yml" and fragment in s.get("run", "")]
    assert len(matches) == 1, f"release.yml has {len(matches)} steps running {fragment!r}"
    return str(matches[0])


def _bash(script: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PATH": path, **env})


def _fetch(url: str, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(FETCH), url, str(out), *extra], capture_output=True, text=True)


@pytest.fixture(scope="module")
def repaired_wheel(cpu_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pyproject's repair-wheel-command, as cibuildwheel runs it: kiln repair, then kiln audit."""
    (command,) = [text for where, text in run_scripts() if where.endswith("repair-wheel-command")]
    tmp = tmp_path_factory.mktemp("repair")
    (tmp / "in").mkdir()
    wheel = shutil.copy2(cpu_wheel, tmp / "in" / cpu_wheel.name)
    for key, value in {"{project}": str(REPO), "{wheel}": str(wheel), "{dest_dir}": str(tmp / "out")}.items():
        command = command.replace(key, value)
    result = _bash(command, cwd=tmp)
    assert result.returncode == 0, result.stdout + result.stderr
    produced = sorted((tmp / "out").glob("*.whl"))
    assert len(produced) == 1
    assert "manylinux_2_" in produced[0].name
    return produced[0]


def test_release_merges_onto_what_is_published(repaired_wheel: Path, serve: object, tmp_path: Path) -> None:
    start = serve  # type: ignore[assignment]
    audit = _release_step("scripts/kiln audit")
    index = _release_step("scripts/kiln index")

    # First release: nothing published yet (404), so only --allow-missing may start from an empty site.
    nothing = tmp_path / "nothing-published"
    nothing.mkdir()
    first = _workspace(tmp_path / "first", [repaired_wheel])
    url = start(nothing)  # type: ignore[operator]
    refused = _fetch(url, first / "site")
    assert refused.returncode == 1 and "--allow-missing" in refused.stderr
    assert _fetch(url, first / "site", "--allow-missing").returncode == 0
    for script in (audit, index):
        result = _bash(script, first, PAGES_URL="https://example.invalid/opkiln/")
        assert result.returncode == 0, result.stdout + result.stderr
    published = first / "site"
    manifest = json.loads((published / "kiln-index.json").read_text())
    assert [w["filename"] for w in manifest["wheels"]] == [repaired_wheel.name]

    # Second release: fetch what is published, add a newer wheel; the published one stays byte for byte.
    version = repaired_wheel.name.split("-")[1]
    plain = _without_directory_entries(repaired_wheel, tmp_path / "plain")
    newer = reversion(plain, tmp_path / "newer", version.replace(version.split("+")[0], "9.9.9"))
    second = _workspace(tmp_path / "second", [newer])
    url = start(published)  # type: ignore[operator]
    fetched = _fetch(url, second / "site")
    assert fetched.returncode == 0, fetched.stderr
    assert "fetched 1 published wheel(s)" in fetched.stdout
    for script in (audit, index):
        result = _bash(script, second, PAGES_URL=url)
        assert result.returncode == 0, result.stdout + result.stderr
    merged = second / "site"
    names = sorted(w["filename"] for w in json.loads((merged / "kiln-index.json").read_text())["wheels"])
    assert names == sorted([repaired_wheel.name, newer.name])
    old = (merged / "wheels" / repaired_wheel.name).read_bytes()
    assert old == (published / "wheels" / repaired_wheel.name).read_bytes()

    # A rebuilt wheel under a published name: the merge refuses, and the site is left as it was.
    third = _workspace(tmp_path / "third", [rezip(repaired_wheel, tmp_path / "rebuilt")])
    assert _fetch(start(merged), third / "site").returncode == 0  # type: ignore[operator]
    before = {p.relative_to(third / "site"): p.read_bytes() for p in (third / "site").rglob("*") if p.is_file()}
    result = _bash(index, third, PAGES_URL=url)
    assert result.returncode == 1, result.stdout + result.stderr
    after = {p.relative_to(third / "site"): p.read_bytes() for p in (third / "site").rglob("*") if p.is_file()}
    assert after == before


# -- tools/fetch_published_site.py on its own ------------------------------------------------------


def _fake_site(root: Path, wheels: dict[str, bytes]) -> Path:
    (root / "wheels").mkdir(parents=True)
    entries = []
    for name, data in wheels.items():
        (root / "wheels" / name).write_bytes(data)
        (root / "wheels" / f"{name}.metadata").write_bytes(b"Metadata-Version: 2.4\n")
        entries.append({"filename": name, "sha256": hashlib.sha256(data).hexdigest(), "size": len(data),
                        "metadata_sha256": hashlib.sha256(b"Metadata-Version: 2.4\n").hexdigest()})
    (root / "kiln-index.json").write_text(json.dumps({"schema": 1, "wheels": entries}))
    return root


def test_fetch_checks_every_file_against_the_manifest(serve: object, tmp_path: Path) -> None:
    start = serve  # type: ignore[assignment]
    site = _fake_site(tmp_path / "site", {"a-1-py3-none-any.whl": b"A", "b-1-py3-none-any.whl": b"BB"})
    url = start(site)  # type: ignore[operator]
    ok = _fetch(url, tmp_path / "ok")
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "ok" / "wheels" / "b-1-py3-none-any.whl").read_bytes() == b"BB"
    assert (tmp_path / "ok" / "kiln-index.json").read_bytes() == (site / "kiln-index.json").read_bytes()

    (site / "wheels" / "b-1-py3-none-any.whl").write_bytes(b"XX")  # same size, other bytes
    tampered = _fetch(url, tmp_path / "tampered")
    assert tampered.returncode == 1 and "sha256 differs" in tampered.stderr
    (site / "wheels" / "a-1-py3-none-any.whl.metadata").unlink()
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
    for torch 2.14.1 is audited (by `kiln audit` and inside `kiln index`) against the recorded torch ABI."""
    start = serve  # type: ignore[assignment]
    audit = _release_step("scripts/kiln audit")
    index = _release_step("scripts/kiln index")
    only_dev_torch = {"OPKILN_AUDIT_TORCH_SEARCH": "interpreter", "PAGES_URL": "https://example.invalid/opkiln/"}
    nothing = tmp_path / "nothing-published"
    nothing.mkdir()
    url = start(nothing)  # type: ignore[operator]

    workspace = _workspace(tmp_path / "release", [repaired_wheel, cuda_wheel])
    assert _fetch(url, workspace / "site", "--allow-missing").returncode == 0
    # Every torch these wheels need is recorded in the repo: the record step downloads nothing.
    recorded = _bash(_release_step("scripts/kiln torch-abi"), workspace, **only_dev_torch)
    assert recorded.returncode == 0 and recorded.stdout == "", recorded.stdout + recorded.stderr
    audited = _bash(audit, workspace, **only_dev_torch)
    assert audited.returncode == 0, audited.stdout + audited.stderr
    text = " ".join(audited.stdout.split())
    assert "torch: 2.14.1+cu130 as recorded in torch_abi/2.14.1+cu130.json" in text
    indexed = _bash(index, workspace, **only_dev_torch)
    assert indexed.returncode == 0, indexed.stdout + indexed.stderr
    listed = {w["filename"] for w in json.loads((workspace / "site" / "kiln-index.json").read_text())["wheels"]}
    assert listed == {repaired_wheel.name, cuda_wheel.name}

    # Without the records the same wheel cannot be checked, and the audit says exactly that.
    bare = _workspace(tmp_path / "no-records", [cuda_wheel])
    (empty := tmp_path / "empty-records").mkdir()
    refused = _bash(audit, bare, **only_dev_torch, OPKILN_TORCH_ABI_DIR=str(empty))
    assert refused.returncode == 1, refused.stdout + refused.stderr
    text = " ".join(refused.stdout.split())
    assert "neither installed here nor recorded" in text and "torch 2.14.1+cu130" in text
