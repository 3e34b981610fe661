"""The signed release manifest and its signature live beside the wheels in a bucket (moto's S3 server on
127.0.0.2), append-only: another manifest under a stored release's name is refused, never written over (a rerun
of the same release adopts the stored signature); the index (pages on 127.0.0.1, wheels in the bucket)
verifies file by file, stored wheels by their absolute URL."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from index.storage_servers import S3_CREDENTIALS, environment, http_server, s3_server
from index.synthetic_wheels import make_wheel
from kiln_tool.guard.signed import release_name
from kiln_tool.index import IndexConflictError, build_index
from kiln_tool.index.storage import open_storage
from kiln_tool.signing import SshSigner, fetch_chain, sign_release
from signing.signed_sites import PRINCIPAL, Keys
from trust.kiln_runs import kiln


def _release(site: Path, dist: Path, key: Path, storage: object) -> None:
    build_index(dist, site, "https://wheels.example.org/", audit=None, storage=storage)  # type: ignore[arg-type]
    sign_release(site, "opkiln", SshSigner(key), fetch_chain(None, "opkiln", site), dist,
                 storage=storage, say=lambda _m: None)  # type: ignore[arg-type]


def test_signatures_are_stored_beside_the_wheels_and_never_replaced(keys: Keys, tmp_path: Path) -> None:
    with s3_server() as s3, environment(S3_CREDENTIALS):
        storage = open_storage(s3.config())
        client = s3.client()
        site = tmp_path / "www" / "idx"
        make_wheel(tmp_path / "d1")
        _release(site, tmp_path / "d1", keys.release, storage)
        make_wheel(tmp_path / "d2", version="0.2.0+pt213cpu")
        _release(site, tmp_path / "d2", keys.release, storage)
        for n in (1, 2):
            for suffix in ("", ".sig"):
                name = release_name(n).rsplit("/", 1)[1] + suffix
                answer = client.get_object(Bucket=s3.bucket, Key=f"wheels/{name}")  # type: ignore[attr-defined]
                stored = answer["Body"].read()
                assert stored == (site / release_name(n)).with_name(name).read_bytes()

        # Release 2 signed again after its deploy was cut short (a keyless signature differs each time; another
        # key stands in for that): the same manifest, so the stored signature is adopted, nothing is put.
        def unsigned_copy(name: str) -> Path:
            again = tmp_path / name
            shutil.copytree(site, again)
            for path in (again / "releases").glob("release-000002.json*"):
                path.unlink()
            (again / "kiln-release.json").write_bytes((again / release_name(1)).read_bytes())
            return again

        again = unsigned_copy("again")
        sign_release(again, "opkiln", SshSigner(keys.other), fetch_chain(None, "opkiln", again), tmp_path / "d2",
                     storage=storage, say=lambda _m: None)  # type: ignore[arg-type]
        assert (again / f"{release_name(2)}.sig").read_bytes() == (site / f"{release_name(2)}.sig").read_bytes()
        # Another release 2 (the site changed meanwhile): the bucket refuses to replace the stored one.
        other = unsigned_copy("other")
        (other / "extra.html").write_text("<p>not in release 2</p>\n")
        with pytest.raises(IndexConflictError, match="already holds this name with other bytes"):
            sign_release(other, "opkiln", SshSigner(keys.release), fetch_chain(None, "opkiln", other), tmp_path / "d2",
                         storage=storage, say=lambda _m: None)  # type: ignore[arg-type]

        (wheel,) = (tmp_path / "d2").glob("*.whl")  # its URL in the bucket is percent-encoded (%2B)
        swapped = tmp_path / "swapped" / wheel.name
        swapped.parent.mkdir()
        swapped.write_bytes(wheel.read_bytes() + b"\0")
        with http_server(tmp_path / "www") as http:
            identity = ["--allowed-signers", keys.allowed_signers, "--identity", PRINCIPAL, "--no-state"]
            run = kiln("verify", "--index", f"{http.url}idx/", *identity, "--all", wheel)
            refused = kiln("verify", "--index", f"{http.url}idx/", *identity, swapped)
    assert run.code == 0, run.stdout + run.stderr
    stored_lines = [line for line in run.stdout.splitlines() if s3.endpoint in line]
    assert len(stored_lines) == 4 and all(line.startswith("OK    ") for line in stored_lines)  # 2 wheels, 2 METADATA
    assert f"OK    {wheel.name}: sha256 matches the signed release 2" in run.stdout
    assert refused.code == 1 and f"FAIL  {wheel.name}: sha256 " in refused.stdout
    assert "another file under its name" in refused.stdout
