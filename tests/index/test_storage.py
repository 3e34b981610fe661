"""Wheels in append-only storage (index/storage.py), against real servers on loopback: the release assets of
the stand-in gh (tools/fake_gh.py) served from 127.0.0.2, and moto's S3 server on 127.0.0.2; the pages on
127.0.0.1. Synthetic wheels, unaudited (the audit is the same for every backend: tests/index/test_install.py
and test_storage_install.py publish real wheels).

Each backend: upload, read back, list; pages link the absolute URL with #sha256; a later run fetches the
manifest alone; an existing name with other bytes, a storage that lies about a digest, an interrupted upload
and a listed wheel gone from storage each end with a clear error and nothing listed that is not stored.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from index.helpers import KILN, tree
from index.storage_servers import S3_CREDENTIALS, environment, http_server, release_assets, s3_server
from index.synthetic_wheels import make_wheel
from kiln_tool.index import IndexConflictError, IndexInputError, IndexIntegrityError, build_index
from kiln_tool.index.fetch import fetch_site
from kiln_tool.index.storage import StorageError, check_config, open_storage

REPOSITORY, TAG = "opkiln/opkiln", "v0.1.0"
BASE = "https://example.invalid/opkiln/"


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as response:
        return bytes(response.read())


@dataclass
class Backend:
    name: str
    config: Callable[..., dict[str, Any]]
    env: Callable[..., dict[str, str]]
    place: Callable[[str, bytes], None]  # put an object there behind kiln's back (another run, an intruder)
    remove: Callable[[str], None]
    names: Callable[[], list[str]]
    wheel_host: str

    def storage(self, metadata: bool = True, **env: str) -> Any:
        with environment(self.env(**env)):
            return open_storage(self.config(metadata=metadata), repository=REPOSITORY, tag=TAG)


@pytest.fixture(params=["github-release", "s3"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    with ExitStack() as stack:
        if request.param == "github-release":
            assets = stack.enter_context(release_assets(tmp_path))
            folder = assets.release_dir(REPOSITORY, TAG)

            def place_asset(name: str, data: bytes) -> None:
                folder.mkdir(parents=True, exist_ok=True)
                (folder / name).write_bytes(data)

            yield Backend(
                "github-release", lambda metadata=True: {"backend": "github-release", "metadata": metadata},
                assets.env, place_asset, lambda name: (folder / name).unlink(),
                lambda: sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) if folder.exists()
                else [], assets.host.url)
        else:
            s3 = stack.enter_context(s3_server())
            client: Any = s3.client()

            def names() -> list[str]:
                found = client.list_objects_v2(Bucket=s3.bucket, Prefix="wheels/").get("Contents", [])
                return sorted(o["Key"].removeprefix("wheels/") for o in found)

            yield Backend(
                "s3", lambda metadata=True: s3.config(metadata=metadata),
                lambda **extra: {**os.environ, **S3_CREDENTIALS, **extra},
                lambda name, data: client.put_object(Bucket=s3.bucket, Key=f"wheels/{name}", Body=data),
                lambda name: client.delete_object(Bucket=s3.bucket, Key=f"wheels/{name}"), names,
                f"{s3.endpoint}/")


def _index(dist: Path, out: Path, backend: Backend, metadata: bool = True, **env: str) -> Any:
    storage = backend.storage(metadata=metadata, **env)
    with environment(backend.env(**env)):
        return build_index(dist, out, BASE, audit=None, storage=storage)


def _manifest(out: Path) -> dict[str, Any]:
    return {w["filename"]: w for w in json.loads((out / "kiln-index.json").read_text())["wheels"]}


def test_wheels_live_in_storage_and_pages_link_them_by_absolute_url(backend: Backend, tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "dist")
    out = tmp_path / "site"
    result = _index(tmp_path / "dist", out, backend)
    assert [w.filename for w in result.added] == [wheel.name]
    assert not (out / "wheels").exists(), "the site holds pages and the manifest, no wheel"
    assert backend.names() == sorted([wheel.name, f"{wheel.name}.metadata"])

    entry = _manifest(out)[wheel.name]
    assert entry["url"].startswith(backend.wheel_host)
    assert entry["stored_at"].startswith(backend.name.split("-")[0])
    data = _get(entry["url"])
    assert data == wheel.read_bytes() and hashlib.sha256(data).hexdigest() == entry["sha256"]
    assert hashlib.sha256(_get(entry["url"] + ".metadata")).hexdigest() == entry["metadata_sha256"]
    page = (out / "cpu" / "torch2.13" / "index.html").read_text()
    href = re.search(r'href="([^"]+)"', page)
    assert href is not None and href.group(1) == f"{entry['url']}#sha256={entry['sha256']}"
    assert f'data-core-metadata="sha256={entry["metadata_sha256"]}"' in page
    assert "no PEP 658 metadata" not in page


def test_a_release_fetches_the_manifest_alone(backend: Backend, tmp_path: Path) -> None:
    make_wheel(tmp_path / "dist", version="0.1.0+pt213cpu")
    published = tmp_path / "published"
    _index(tmp_path / "dist", published, backend)
    with http_server(published) as pages:
        stats: dict[str, int] = {}
        site = tmp_path / "site"
        assert fetch_site(pages.url, site, stats=stats) == 0
        assert stats["bytes"] == (published / "kiln-index.json").stat().st_size
        # The manifest, then the live pages it is checked against (index/fetch.py): no wheel.
        assert pages.requests[0] == "/kiln-index.json"
        assert all(r.startswith("/simple/") for r in pages.requests[1:]), pages.requests
    newer = make_wheel(tmp_path / "dist2", version="0.2.0+pt213cpu")
    result = _index(tmp_path / "dist2", site, backend)
    assert [w.filename for w in result.added] == [newer.name]
    before, after = _manifest(published), _manifest(site)
    assert {k: after[k] for k in before} == before, "a published entry is never rewritten"
    assert not (site / "wheels").exists()


def test_a_site_fetched_as_its_manifest_gets_every_page_rendered(backend: Backend, tmp_path: Path) -> None:
    """A release deploys SITE whole (GitHub Pages replaces the site): a merge into the fetched manifest renders
    every page, those of combinations the new wheel does not touch too."""
    make_wheel(tmp_path / "dist", version="0.1.0+pt213cpu")
    published = tmp_path / "published"
    _index(tmp_path / "dist", published, backend)
    with http_server(published) as pages:
        fetch_site(pages.url, tmp_path / "site")
    make_wheel(tmp_path / "dist2", version="0.2.0+pt214cu130", cuda_tag="cu130", torch_major_minor="2.14",
               torch_requirement="torch<2.15,>=2.14")
    with environment(backend.env()):
        build_index(tmp_path / "dist2", tmp_path / "site", BASE, audit=None, storage=backend.storage(),
                    render_all=True)
    rendered = {p.relative_to(tmp_path / "site").as_posix() for p in (tmp_path / "site").rglob("*.html")}
    assert {p.relative_to(published).as_posix() for p in published.rglob("*.html")} <= rendered
    assert {"cu130/torch2.14/index.html", "cpu/torch2.13/index.html", "simple/index.html"} <= rendered


def test_wheels_published_in_the_site_folder_stay_there_when_storage_takes_over(backend: Backend,
                                                                              tmp_path: Path) -> None:
    """A site from before storage: its wheels are fetched with the manifest (checked by sha256) and stay in the
    site folder, linked relatively; new wheels go to storage, linked absolutely. Only the old ones download."""
    old = make_wheel(tmp_path / "dist", version="0.1.0+pt213cpu")
    published = tmp_path / "published"
    build_index(tmp_path / "dist", published, BASE, audit=None)
    with http_server(published) as pages:
        stats: dict[str, int] = {}
        assert fetch_site(pages.url, tmp_path / "site", stats=stats) == 1
        assert stats["stored"] == 0
    new = make_wheel(tmp_path / "dist2", version="0.2.0+pt213cpu")
    _index(tmp_path / "dist2", tmp_path / "site", backend)
    entries = _manifest(tmp_path / "site")
    assert "url" not in entries[old.name] and entries[new.name]["url"].startswith(backend.wheel_host)
    assert (tmp_path / "site" / "wheels" / old.name).read_bytes() == old.read_bytes()
    assert not (tmp_path / "site" / "wheels" / new.name).exists() and backend.names() == sorted(
        [new.name, f"{new.name}.metadata"])
    page = (tmp_path / "site" / "cpu" / "torch2.13" / "index.html").read_text()
    assert f'href="../../wheels/{quote(old.name, safe="")}#sha256=' in page
    assert f'href="{entries[new.name]["url"]}#sha256={entries[new.name]["sha256"]}"' in page


def test_an_existing_name_with_other_bytes_is_refused_before_any_upload(backend: Backend, tmp_path: Path) -> None:
    first = make_wheel(tmp_path / "dist", version="0.1.0+pt213cpu")
    second = make_wheel(tmp_path / "dist", version="0.2.0+pt213cpu")
    backend.place(second.name, b"other bytes under that name")
    with pytest.raises(IndexConflictError, match=f"{re.escape(second.name)}: .* already holds this name"):
        _index(tmp_path / "dist", tmp_path / "site", backend)
    assert not (tmp_path / "site").exists(), "nothing written"
    assert backend.names() == [second.name], f"nothing uploaded, not even {first.name}"


def test_an_interrupted_upload_is_adopted_by_the_next_run(backend: Backend, tmp_path: Path) -> None:
    first = make_wheel(tmp_path / "dist", version="0.1.0+pt213cpu")
    make_wheel(tmp_path / "dist", version="0.2.0+pt213cpu")
    # What a run cut short after its first upload left: the wheel's METADATA and the wheel itself in storage,
    # neither listed anywhere.
    backend.place(f"{first.name}.metadata", _metadata_of(first))
    backend.place(first.name, first.read_bytes())
    logs: list[str] = []
    storage = backend.storage()
    with environment(backend.env()):
        result = build_index(tmp_path / "dist", tmp_path / "site", BASE, audit=None, storage=storage,
                             log=logs.append)
    assert len(result.added) == 2
    assert any(line.startswith(f"adopted {first.name}:") for line in logs), logs
    assert len(backend.names()) == 4
    for entry in _manifest(tmp_path / "site").values():
        assert hashlib.sha256(_get(entry["url"])).hexdigest() == entry["sha256"]


def _metadata_of(wheel: Path) -> bytes:
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return archive.read(name)


@pytest.mark.parametrize("cut_after", range(4))
def test_a_real_interruption_of_gh_uploads_then_a_rerun(tmp_path: Path, cut_after: int) -> None:
    """The stand-in gh fails an upload (a connection reset) after each possible number of the 4 uploads (2 wheels,
    2 METADATA files): exit 2, nothing listed; the rerun adopts what made it and uploads the rest, once."""
    with release_assets(tmp_path) as assets:
        make_wheel(tmp_path / "dist", version="0.1.0+pt213cpu")
        make_wheel(tmp_path / "dist", version="0.2.0+pt213cpu")
        cfg = tmp_path / "storage.json"
        cfg.write_text(json.dumps({"backend": "github-release"}))
        args = [sys.executable, str(KILN), "index", str(tmp_path / "dist"), str(tmp_path / "site"), "--storage",
                str(cfg), "--repository", REPOSITORY, "--tag", TAG, "--base-url", BASE]
        cut = subprocess.run(args, capture_output=True, text=True,
                             env=assets.env(FAKE_GH_FAIL_AFTER=str(cut_after)))
        assert cut.returncode == 2, cut.stdout + cut.stderr
        assert "connection reset" in cut.stderr and "nothing written" in cut.stderr
        assert not (tmp_path / "site").exists()
        folder = assets.release_dir(REPOSITORY, TAG)
        uploaded = sorted(p.name for p in folder.iterdir() if p.name[0] != ".")
        assert len(uploaded) == cut_after
        again = subprocess.run(args, capture_output=True, text=True, env=assets.env())
        assert again.returncode == 0, again.stdout + again.stderr
        assert sorted(line.split()[1].rstrip(":") for line in again.stdout.splitlines()
                      if line.startswith("adopted ")) == uploaded
        assert len([p for p in folder.iterdir() if p.name[0] != "."]) == 4
        for entry in _manifest(tmp_path / "site").values():
            assert hashlib.sha256(_get(entry["url"])).hexdigest() == entry["sha256"]


def test_a_release_asks_gh_for_the_listing_twice_whatever_it_uploads(tmp_path: Path) -> None:
    """One listing before the uploads (what exists), one after (the read-back): not one per file (a release of
    this matrix uploads ~324 files)."""
    with release_assets(tmp_path) as assets:
        for minor in range(3):
            make_wheel(tmp_path / "dist", version=f"0.{minor + 1}.0+pt213cpu")
        log = tmp_path / "gh.log"
        with environment(assets.env(FAKE_GH_LOG=str(log))):
            storage = open_storage({"backend": "github-release"}, repository=REPOSITORY, tag=TAG)
            build_index(tmp_path / "dist", tmp_path / "site", BASE, audit=None, storage=storage)
        calls = log.read_text().splitlines()
        assert calls.count("release view") == 2, calls
        assert calls.count("release upload") == 6 and calls.count("release create") == 1, calls


def test_a_storage_that_lies_about_a_digest_gets_nothing_listed(tmp_path: Path) -> None:
    with release_assets(tmp_path) as assets:
        wheel = make_wheel(tmp_path / "dist")
        storage_env = assets.env(FAKE_GH_LIE_DIGEST=wheel.name)
        with environment(storage_env):
            storage = open_storage({"backend": "github-release"}, repository=REPOSITORY, tag=TAG)
            with pytest.raises(IndexIntegrityError, match=r"reads back with sha256 .* not listed"):
                build_index(tmp_path / "dist", tmp_path / "site", BASE, audit=None, storage=storage)
        assert not (tmp_path / "site").exists()


def test_an_s3_object_whose_checksum_does_not_match_is_refused(tmp_path: Path) -> None:
    """The bucket reports a ChecksumSHA256 that is not the object's (moto, unlike AWS, stores what it is told):
    kiln believes the storage's word, so the name counts as taken by other bytes and nothing is listed."""
    import base64

    with s3_server() as s3:
        client: Any = s3.client()
        wheel = make_wheel(tmp_path / "dist")
        client.put_object(Bucket=s3.bucket, Key=f"wheels/{wheel.name}", Body=wheel.read_bytes(),
                          ChecksumAlgorithm="SHA256", ChecksumSHA256=base64.b64encode(b"\0" * 32).decode())
        with environment({**os.environ, **S3_CREDENTIALS}):
            storage = open_storage(s3.config(), repository=None, tag=None)
            with pytest.raises(IndexConflictError, match="already holds this name"):
                build_index(tmp_path / "dist", tmp_path / "site", BASE, audit=None, storage=storage)
        assert not (tmp_path / "site").exists()


def test_a_listed_wheel_gone_from_storage_stops_the_next_run(backend: Backend, tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "dist", version="0.1.0+pt213cpu")
    site = tmp_path / "site"
    _index(tmp_path / "dist", site, backend)
    backend.remove(wheel.name)
    before = tree(site)
    make_wheel(tmp_path / "dist2", version="0.2.0+pt213cpu")
    with pytest.raises(IndexIntegrityError, match=f"(?s)missing from their storage.*{re.escape(wheel.name)}"):
        _index(tmp_path / "dist2", site, backend)
    assert tree(site) == before
    assert not any(n.startswith("opkiln-0.2.0") for n in backend.names()), "nothing uploaded"


def test_metadata_left_out_where_the_storage_does_not_serve_it(backend: Backend, tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "dist")
    out = tmp_path / "site"
    _index(tmp_path / "dist", out, backend, metadata=False)
    assert backend.names() == [wheel.name]
    for page in (out / "cpu" / "torch2.13" / "index.html", out / "simple" / "opkiln" / "index.html"):
        text = page.read_text()
        assert "data-core-metadata" not in text and "data-dist-info-metadata" not in text
        assert "1 wheel(s) here have no PEP 658 metadata file" in text
    assert _manifest(out)[wheel.name]["metadata_beside"] is False


# -- configuration: bad input is a clear error, exit 2, nothing written -------------------------------------

def _nested(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=4)


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20), _nested, max_leaves=8)
KEYS = st.sampled_from(["backend", "metadata", "repository", "tag", "bucket", "prefix", "endpoint_url", "region",
                        "public_url", "$comment", "extra"])
VALUES = st.one_of(st.sampled_from(["site", "github-release", "s3", "S3", "", "kiln-wheels", "wheels/", "../x/",
                                    "http://127.0.0.2:9000", "https://cdn.example.org/", "owner/name", "v1.0",
                                    "javascript:alert(1)", "a b"]), JSON)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(KEYS, VALUES, max_size=6) | JSON)
def test_any_configuration_is_accepted_whole_or_refused_with_one_line(doc: object) -> None:
    try:
        accepted = check_config(doc, "storage.json")
    except IndexInputError as exc:
        message = str(exc)
        assert message.startswith("storage.json: not a storage configuration: ") and "\n" not in message
        return
    assert isinstance(accepted, dict) and accepted["backend"] in ("site", "github-release", "s3")
    allowed = {"site": {"backend", "metadata", "$comment"},
               "github-release": {"backend", "metadata", "$comment", "repository", "tag"},
               "s3": {"backend", "metadata", "$comment", "bucket", "prefix", "endpoint_url", "region", "public_url"}}
    assert set(accepted) <= allowed[accepted["backend"]]
    if accepted["backend"] == "s3":
        assert accepted["public_url"].endswith("/") and ".." not in accepted.get("prefix", "")
    if accepted["backend"] == "site":
        assert accepted.get("metadata", True) is True


@pytest.mark.parametrize(("config", "message"), [
    ("{", "not JSON"),
    (json.dumps({"backend": "ftp"}), "data.backend must be one of"),
    (json.dumps({"backend": "s3", "bucket": "kiln-wheels"}), "public_url"),
    (json.dumps({"backend": "s3", "bucket": "kiln-wheels", "public_url": "https://cdn.example.org/",
                 "aws_secret_access_key": "x"}), "must not contain {'aws_secret_access_key'}"),
    (json.dumps({"backend": "github-release"}), "name the repository and the tag"),
])
def test_a_bad_configuration_is_exit_2_and_nothing_written(tmp_path: Path, config: str, message: str) -> None:
    make_wheel(tmp_path / "dist")
    (tmp_path / "storage.json").write_text(config)
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_REPOSITORY", "TAG")}
    result = subprocess.run([sys.executable, str(KILN), "index", str(tmp_path / "dist"), str(tmp_path / "site"),
                             "--storage", str(tmp_path / "storage.json")], capture_output=True, text=True, env=env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr and "nothing written" in result.stderr
    assert not (tmp_path / "site").exists()


def test_an_unreachable_storage_is_exit_2_and_nothing_written(tmp_path: Path) -> None:
    pytest.importorskip("boto3", reason="the S3 backend needs boto3 (requirements/storage-test.txt)")
    make_wheel(tmp_path / "dist")
    with environment({**os.environ, **S3_CREDENTIALS}):
        storage = open_storage({"backend": "s3", "bucket": "kiln-wheels", "endpoint_url": "http://127.0.0.2:9",
                                "public_url": "http://127.0.0.2:9/kiln-wheels/"}, repository=None, tag=None)
        with pytest.raises(StorageError, match=re.escape("127.0.0.2:9")):
            build_index(tmp_path / "dist", tmp_path / "site", BASE, audit=None, storage=storage)
    assert not (tmp_path / "site").exists()
