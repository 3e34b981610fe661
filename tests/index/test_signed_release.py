"""Issue 46 end to end in the key mode: `kiln release --sign-key` of real wheels onto a site served on 127.0.0.1
(two releases, chained), a user's fresh venv installs with `pip install -f`, then `kiln verify` (the downloaded
wheel, the whole index, the installed package) and the package's own `python -m opkiln._kiln doctor --verify`
hold; a file changed after install, and an unsigned release onto the signed index, are refused."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path

import pytest

from index.storage_servers import http_server
from index.synthetic_wheels import _with_record, reversion
from signing.signed_sites import PRINCIPAL, make_keys
from trust.kiln_runs import kiln

REPO = Path(__file__).resolve().parents[2]


def _as_committed(wheel: Path, directory: Path) -> Path:
    """The wheel minus zip directory entries (auditwheel writes them; `reversion` would list them in RECORD), its
    build info saying the tree was its commit: a checkout where engineers work is never clean, and the release
    refuses a wheel of a dirty tree (CI builds from a clean one). RECORD follows."""
    directory.mkdir(parents=True, exist_ok=True)
    out = directory / wheel.name
    files: dict[str, tuple[zipfile.ZipInfo, bytes]] = {}
    with zipfile.ZipFile(wheel) as src:
        for info in src.infolist():
            if info.is_dir():
                continue
            data = src.read(info)
            if info.filename.endswith("/_build_info.json") and info.filename.count("/") == 1:
                doc = json.loads(data)
                doc["git_dirty"] = False
                data = (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()
            files[info.filename] = (info, data)
    (dist_info,) = {name.split("/")[0] for name in files if name.split("/")[0].endswith(".dist-info")}
    recorded = _with_record({name: data for name, (_info, data) in files.items()}, dist_info)
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as dst:
        for name, data in recorded.items():
            dst.writestr(files[name][0], data)
    return out


def _deploy(site: Path, served: Path) -> None:
    """A Pages deployment: the whole site replaces what was served."""
    shutil.rmtree(served, ignore_errors=True)
    shutil.copytree(site, served)


def _run(python: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(env or {})})


@pytest.mark.slow  # two release audits, a pip install into the session's venv: ~40 s at load 6
def test_a_signed_release_verifies_from_a_users_fresh_venv(published_wheel: Path, fresh_venv: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from kiln_tool.release import ReleaseError, run_release
    from kiln_tool.signing import SshSigner

    with zipfile.ZipFile(published_wheel) as archive:
        assert "opkiln/_kiln/verify.py" in archive.namelist(), \
            f"{published_wheel.name} predates the guard's --verify (rebuild it: make wheels)"
    tag = published_wheel.name.rsplit("-", 1)[1].removesuffix(".whl").removesuffix("_x86_64")
    if tag != "manylinux_2_28":
        monkeypatch.setenv("KILN_STANDIN_MANYLINUX", tag)  # a stand-in base's tag (docs/containers.md)
    keys = make_keys(tmp_path / "keys")
    storage = tmp_path / "storage.json"
    storage.write_text(json.dumps({"backend": "site"}))
    www = tmp_path / "www"
    www.mkdir()
    version = published_wheel.name.split("-")[1]
    published_wheel = _as_committed(published_wheel, tmp_path / "committed")
    newer = reversion(published_wheel, tmp_path / "newer", version.replace(version.split("+")[0], "0.1.1"))
    said: list[str] = []
    with http_server(www) as http:
        url = f"{http.url}opkiln/"
        for n, (wheel, first) in enumerate(((published_wheel, True), (newer, False)), start=1):
            dist = tmp_path / f"dist{n}"
            dist.mkdir()
            shutil.copy2(wheel, dist / wheel.name)
            run_release(dist, tmp_path / f"site{n}", url, url, first_release=first, storage_config=storage,
                        signer=SshSigner(keys.release), say=said.append)
            _deploy(tmp_path / f"site{n}", www / "opkiln")
        assert any("signed releases/release-000002.json" in line and "chained to release 1" in line for line in said)

        # An unsigned release onto the signed index is refused before anything is written.
        with pytest.raises(ReleaseError, match="the published index is signed") as refused:
            run_release(tmp_path / "dist2", tmp_path / "unsigned", url, url, first_release=False,
                        storage_config=storage, say=said.append)
        assert refused.value.exit_code == 2

        # The user: a fresh venv, pip install -f the page, then verify.
        python = fresh_venv
        installed = _run(python, "-m", "pip", "install", "--no-cache-dir", "--no-index", f"opkiln=={version}",
                         "-f", f"{url}cpu/torch2.13/index.html")
        assert installed.returncode == 0, installed.stdout + installed.stderr
        try:
            downloaded = tmp_path / "downloads" / published_wheel.name
            downloaded.parent.mkdir()
            with urllib.request.urlopen(f"{url}wheels/{published_wheel.name.replace('+', '%2B')}") as answer:
                downloaded.write_bytes(answer.read())
            identity = ["--allowed-signers", str(keys.allowed_signers), "--identity", PRINCIPAL]
            run = kiln("verify", "--index", url, *identity, "--all", "--no-state", downloaded)
            assert run.code == 0, run.stdout + run.stderr
            assert f"OK    {published_wheel.name}: sha256 matches the signed release 2" in run.stdout
            assert f"OK    wheels/{newer.name}: sha256 matches the signed release 2" in run.stdout
            assert "FAIL" not in run.stdout

            # kiln verify --installed, run by the user's Python (kiln from this checkout's source: no install).
            env = {"PYTHONPATH": str(REPO / "src"), "XDG_STATE_HOME": str(tmp_path / "state")}
            run_in_venv = _run(python, "-m", "kiln_tool", "verify", "--index", url, *identity, "--installed",
                               "opkiln", env=env)
            assert run_in_venv.returncode == 0, run_in_venv.stdout + run_in_venv.stderr
            assert f"its files are exactly those of {published_wheel.name}, signed in release 2" in run_in_venv.stdout

            # The package's own doctor, with nothing but the package (and ssh-keygen).
            doctor = _run(python, "-m", "opkiln._kiln", "doctor", "--verify", "--index", url, *identity, env=env)
            assert doctor.returncode == 0, doctor.stdout + doctor.stderr
            assert f"its files are exactly those of {published_wheel.name}, signed in release 2" in doctor.stdout
            assert "Verdict: OK" in doctor.stdout

            # A file of the installed package changed: the doctor names it and fails.
            located = _run(python, "-c", "import opkiln._kiln.guard as g, pathlib; "
                                         "print(pathlib.Path(g.__file__))", env=env)
            changed = Path(located.stdout.strip().splitlines()[-1]).resolve()
            changed.write_text(changed.read_text() + "\n# changed after install\n")
            doctor = _run(python, "-m", "opkiln._kiln", "doctor", "--verify", "--index", url, *identity, env=env)
            assert doctor.returncode == 1, doctor.stdout + doctor.stderr
            assert f"FAIL  {changed}: changed since it was installed" in doctor.stdout
            assert "its files are those of no wheel in the signed release 2" in doctor.stdout
        finally:
            _run(python, "-m", "pip", "uninstall", "-y", "-q", "opkiln")


def test_sign_key_must_exist(tmp_path: Path) -> None:
    run = kiln("release", tmp_path, tmp_path / "site", "--base-url", "http://127.0.0.1:9/", "--first-release",
               "--sign-key", tmp_path / "nokey")
    assert run.code == 2 and "--sign-key" in run.stderr and "no such file" in run.stderr
    assert not (tmp_path / "site").exists()


def test_sign_key_and_keyless_exclude_each_other(tmp_path: Path) -> None:
    run = kiln("release", tmp_path, tmp_path / "site", "--base-url", "http://127.0.0.1:9/", "--first-release",
               "--sign-key", tmp_path / "k", "--sign-keyless")
    assert run.code == 2 and "not allowed with argument" in run.stderr


def test_keyless_without_an_oidc_identity_is_refused_before_anything_runs(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("sigstore", reason="keyless signing needs sigstore-python (requirements/signing.txt)")
    for name in ("GITHUB_ACTIONS", "ACTIONS_ID_TOKEN_REQUEST_URL", "ACTIONS_ID_TOKEN_REQUEST_TOKEN",
                 "SIGSTORE_ID_TOKEN", "KILN_SIGNING_STANDIN_KEY"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "dist").mkdir()
    run = kiln("release", tmp_path / "dist", tmp_path / "site", "--base-url", "http://127.0.0.1:9/",
               "--first-release", "--sign-keyless")
    assert run.code == 2 and "sign: keyless signing: no ambient OIDC credential" in run.stderr, run.stderr
    assert not (tmp_path / "site").exists()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
