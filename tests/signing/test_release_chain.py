"""A release extends the published chain (kiln_tool.signing.fetch_chain, sign_release): fetched from the served
site, carried into the new SITE byte for byte, the next manifest chained to the last one; a broken published
chain stops the release, and a chain file is never written over."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from index.storage_servers import http_server
from index.synthetic_wheels import make_wheel
from kiln_tool.guard.signed import LATEST, release_name
from kiln_tool.index import build_index
from kiln_tool.signing import SigningError, SshSigner, fetch_chain, sign_release
from signing.signed_sites import PRINCIPAL, History, Keys
from trust.kiln_runs import kiln


def test_a_third_release_carries_the_chain_into_a_fresh_site(history: History, keys: Keys, tmp_path: Path) -> None:
    www = tmp_path / "www"
    shutil.copytree(history.second, www / "idx")
    with http_server(www) as http:
        url = f"{http.url}idx/"
        published = fetch_chain(url, "opkiln")
        assert published.chain is not None and published.chain.head.sequence == 2
        assert sorted(published.files) == sorted([LATEST, release_name(1), release_name(2),
                                                  f"{release_name(1)}.sig", f"{release_name(2)}.sig"])
        # The release's SITE: the fetched manifest, merged with a new wheel (as kiln release does), then signed.
        site = tmp_path / "site"
        site.mkdir()
        shutil.copy2(www / "idx" / "kiln-index.json", site / "kiln-index.json")
        shutil.copytree(www / "idx" / "wheels", site / "wheels")
        make_wheel(tmp_path / "dist3", version="0.3.0+pt213cpu")
        build_index(tmp_path / "dist3", site, audit=None, render_all=True)
        sign_release(site, "opkiln", SshSigner(keys.release), published, tmp_path / "dist3", say=lambda _m: None)
        for rel, data in published.files.items():
            if rel != LATEST:
                assert (site / rel).read_bytes() == data, f"{rel} not carried byte for byte"
        head = json.loads((site / LATEST).read_bytes())
        assert head["sequence"] == 3
        assert head["previous"] == hashlib.sha256((site / release_name(2)).read_bytes()).hexdigest()
        shutil.rmtree(www / "idx")
        shutil.copytree(site, www / "idx")
        run = kiln("verify", "--index", url, "--allowed-signers", keys.allowed_signers, "--identity", PRINCIPAL,
                   "--no-state", "--all")
    assert run.code == 0, run.stdout + run.stderr
    assert "chain of 3 release(s) is intact" in run.stdout


def test_a_broken_published_chain_stops_the_release(history: History, tmp_path: Path) -> None:
    site = tmp_path / "idx"
    shutil.copytree(history.second, site)
    (site / release_name(1)).unlink()
    with pytest.raises(SigningError, match=r"the published release chain: releases/release-000001\.json: missing"):
        fetch_chain(None, "opkiln", site)
    for path in (site / "releases").glob("*.sig"):
        path.unlink()
    (site / release_name(1)).write_bytes((history.second / release_name(1)).read_bytes())
    with pytest.raises(SigningError, match="carries no signature"):
        fetch_chain(None, "opkiln", site)


def test_a_chain_file_is_never_written_over(history: History, keys: Keys, tmp_path: Path) -> None:
    site = tmp_path / "idx"
    shutil.copytree(history.second, site)
    published = fetch_chain(None, "opkiln", site)
    (site / f"{release_name(1)}.sig").write_bytes(b"another signature\n")
    before = (site / LATEST).read_bytes()
    with pytest.raises(SigningError, match=r"release-000001\.json\.sig: already holds other bytes; a signed release "
                                           "is never replaced"):
        sign_release(site, "opkiln", SshSigner(keys.release), published, say=lambda _m: None)
    assert (site / LATEST).read_bytes() == before and not (site / release_name(3)).exists()


def test_a_rotated_key_keeps_the_older_releases_verifiable(keys: Keys, tmp_path: Path) -> None:
    """Release 1 signed with the old key, release 2 with the new one; the allowed signers name only the new key:
    the chain verifies (release 2's signature commits to release 1 by sha256)."""
    from signing.signed_sites import release

    make_wheel(tmp_path / "d1")
    make_wheel(tmp_path / "d2", version="0.2.0+pt213cpu")
    site = tmp_path / "www" / "idx"
    release(site, tmp_path / "d1", keys.other)  # the old key, not in the allowed signers
    release(site, tmp_path / "d2", keys.release)
    with http_server(tmp_path / "www") as http:
        run = kiln("verify", "--index", f"{http.url}idx/", "--allowed-signers", keys.allowed_signers, "--identity",
                   PRINCIPAL, "--no-state", "--all")
    assert run.code == 0, run.stdout + run.stderr
    assert "chain of 2 release(s) is intact" in run.stdout
