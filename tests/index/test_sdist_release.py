"""The source fallback through a real release (issue 42, item 2): `kiln release --sdist --sign-key` of the real CPU
wheel and an sdist onto a site served on 127.0.0.1; a user's fresh venv runs `pip install opkiln --no-binary opkiln
--no-build-isolation -f <site>/source/`, which finds the sdist on the source page and builds it; `kiln verify --all`
covers the sdist (the signed release manifest lists it), and a swapped sdist on the host is a FAIL.

The sdist is a STAND-IN (index/sdist_files.py: the layout pip builds, setuptools' backend, one module), so pip
builds it in seconds; tests/adopters/test_sdist.py builds a real kiln sdist against a torch the matrix lacks.
Cost: one release audit of the real wheel, a venv (uv), one pip build: 25 s at load 6.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from index.sdist_files import make_sdist
from index.storage_servers import http_server
from index.test_signed_release import _as_committed, _deploy
from kiln_tool.venvs import PIP_REQUIREMENTS, ensure_venv, pinned
from signing.signed_sites import PRINCIPAL, make_keys
from trust.kiln_runs import kiln

pytestmark = pytest.mark.slow


def _pip_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    return {**env, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_CONFIG_FILE": os.devnull}


def test_pip_builds_the_released_sdist_and_kiln_verify_covers_it(published_wheel: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from kiln_tool.release import ReleaseError, run_release
    from kiln_tool.signing import SshSigner

    tag = published_wheel.name.rsplit("-", 1)[1].removesuffix(".whl").removesuffix("_x86_64")
    if tag != "manylinux_2_28":
        monkeypatch.setenv("KILN_STANDIN_MANYLINUX", tag)  # a stand-in base's tag (docs/containers.md)
    keys = make_keys(tmp_path / "keys")
    storage = tmp_path / "storage.json"
    storage.write_text(json.dumps({"backend": "site"}))
    dist = tmp_path / "dist"
    _as_committed(published_wheel, dist)
    version = published_wheel.name.split("-")[1].split("+")[0]
    sdist = make_sdist(tmp_path / "sdist", version=version)
    www = tmp_path / "www"
    www.mkdir()
    with http_server(www) as http:
        url = f"{http.url}opkiln/"
        # A labelled sdist is refused before anything is audited, fetched or written.
        labelled = make_sdist(tmp_path / "labelled", version=f"{version}+pt213cpu")
        with pytest.raises(ReleaseError, match=r"unusable sdist: .*carries a local label") as refused:
            run_release(dist, tmp_path / "refused", url, None, first_release=True, storage_config=storage,
                        signer=SshSigner(keys.release), sdists=[labelled], say=lambda _s: None)
        assert refused.value.exit_code == 2 and not (tmp_path / "refused").exists()

        said: list[str] = []
        result = run_release(dist, tmp_path / "site", url, None, first_release=True, storage_config=storage,
                             signer=SshSigner(keys.release), sdists=[sdist], say=said.append)
        assert sdist.name in result.added, said
        _deploy(tmp_path / "site", www / "opkiln")

        # The user's venv: pip and a setuptools that builds wheels (the stand-in's backend), nothing of ours.
        base = Path(getattr(sys, "_base_executable", sys.executable))
        python = ensure_venv(tmp_path / "user", base, packages=[f"pip=={pinned('pip', PIP_REQUIREMENTS)}",
                                                               "setuptools>=70.1"])
        cmd = [str(python), "-m", "pip", "install", "--no-index", "--no-deps", "--no-cache-dir", "--no-binary",
               "opkiln", "--no-build-isolation", "-f", f"{url}source/", "opkiln"]
        installed = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=_pip_env(), check=False)
        assert installed.returncode == 0, installed.stdout + installed.stderr
        assert f"source/../sdist/{sdist.name}" in installed.stdout or sdist.name in installed.stdout, installed.stdout
        probe = subprocess.run([str(python), "-c", "import kiln_sdist_standin as m; print(m.BUILT_FROM)"],
                               capture_output=True, text=True, timeout=60, check=False)
        assert probe.stdout.strip() == "sdist", probe.stdout + probe.stderr

        identity = ["--allowed-signers", str(keys.allowed_signers), "--identity", PRINCIPAL]
        run = kiln("verify", "--index", url, *identity, "--all", "--no-state")
        assert run.code == 0, run.stdout + run.stderr
        assert f"OK    sdist/{sdist.name}: sha256 matches the signed release 1" in run.stdout, run.stdout
        assert "OK    source/index.html: sha256 matches the signed release 1" in run.stdout, run.stdout
        # The sdist as a user downloaded it, checked against the signed release like a downloaded wheel.
        downloaded = tmp_path / "downloads" / sdist.name
        downloaded.parent.mkdir()
        shutil.copy(www / "opkiln" / "sdist" / sdist.name, downloaded)
        run = kiln("verify", "--index", url, *identity, "--no-state", downloaded)
        assert run.code == 0 and f"OK    {sdist.name}: sha256 matches the signed release 1" in run.stdout, run.stdout

        # The host swaps the sdist (same name, other bytes): kiln verify fails on exactly that file.
        shutil.copy(make_sdist(tmp_path / "swapped", version=version, note="swapped"),
                    www / "opkiln" / "sdist" / sdist.name)
        run = kiln("verify", "--index", url, *identity, "--all", "--no-state")
        assert run.code == 1, run.stdout + run.stderr
        failed = [line for line in run.stdout.splitlines() if line.startswith("FAIL")]
        assert len(failed) == 1 and failed[0].startswith(f"FAIL  sdist/{sdist.name}: "), run.stdout
