"""Round 3: `kiln release` / `kiln index` as an attacker, a flaky network or a careless maintainer meet them.

Class 1, a ledger that only extends: a fetched manifest older than the live pages is refused, caches are asked
for a fresh copy, a name another release's assets hold with other bytes is refused.
Class 2, bounded fetch: size cap, a total deadline, http(s) redirects only, the strict manifest reader at fetch
time; each failure one line naming its cause, exit 2 for bad input and 1 where a retry may help.
Class 3, one snapshot of DIST: links, FIFOs and other non-regular files refused alike by both commands before
anything opens them; a wheel that lands in DIST mid-release is not published.
Class 4, an S3 PUT stored but whose answer was lost: boto3's retry is not a conflict (moto behind a proxy).
Class 5, bounds before copying (a non-zip or sparse huge file never reaches staging), path components no file
system can install, and a merge that meets a read-only folder leaves the site as it was.
Real servers on 127.0.0.1 (tests/trust/hostile_http.py, moto, the gh stand-in); synthetic wheels.
"""

from __future__ import annotations

import hashlib
import http.client
import http.server
import json
import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from index.storage_servers import S3_CREDENTIALS, environment, release_assets, s3_server
from index.synthetic_wheels import make_wheel
from kiln_tool.audit import torch_abi
from kiln_tool.index import build_index, fetch
from kiln_tool.index import publish as publish_module
from kiln_tool.index.storage import open_storage
from trust.hostile_http import body, drip, hostile_server, redirect, status
from trust.kiln_runs import Run, kiln, kiln_subprocess, tree

FLOOR = "manylinux_2_28_x86_64"
BASE = "https://example.invalid/opkiln/"


def _wheel(directory: Path, version: str = "0.1.0+pt213cpu", **kw: Any) -> Path:
    return make_wheel(directory, version=version, platform=kw.pop("platform", FLOOR), **kw)


@pytest.fixture(scope="session")
def abi_records(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The recorded torch ABIs, plus 2.13.0 (the synthetic wheels' torch_version) as 2.13.0+cpu."""
    where = tmp_path_factory.mktemp("abi") / "torch_abi"
    shutil.copytree(torch_abi.DATA_DIR, where)
    shutil.copy(where / "2.13.0+cpu.json", where / "2.13.0.json")
    return where


@pytest.fixture
def cfg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, abi_records: Path) -> Path:
    monkeypatch.setenv(torch_abi.DATA_DIR_ENV, str(abi_records))
    path = tmp_path / "storage.json"
    path.write_text(json.dumps({"backend": "site"}))
    return path


def _published(tmp: Path, *versions: str) -> Path:
    """A site folder holding one wheel per version, each merged by its own `kiln index` run."""
    www = tmp / "www"
    for version in versions:
        dist = tmp / f"dist-{version}"
        _wheel(dist, version)
        assert kiln("index", dist, www, "--base-url", BASE).code == 0
    return www


def _release(dist: Path, site: Path, url: str, cfg: Path, *extra: str) -> Run:
    return kiln("release", dist, site, "--base-url", url, "--published", url, "--storage", cfg, *extra)


def _one_line(run: Run, exit_code: int, *needles: str) -> None:
    assert run.code == exit_code, (run.code, run.stderr)
    assert "Traceback" not in run.stderr and "cannot use this input" not in run.stderr, run.stderr
    for needle in needles:
        assert needle in run.stderr, run.stderr


# -- class 2: bounded fetch ------------------------------------------------------------------------------------

MANIFEST_FAULTS = {
    "over-the-cap": (lambda: body(b" " * (2 << 20)), 2, "more than the limit"),
    "declares-640-MiB": (lambda: body(b"{}", length=640 << 20), 2, "refused before reading"),
    "dripped": (lambda: drip(b" " * 60, 0.1), 1, "not fetched within"),
    "redirect-to-ftp": (lambda: redirect("ftp://127.0.0.1/kiln-index.json"), 2, "only http(s) redirects"),
    "truncated": (lambda: body(b'{"schema": 1, "wheels": []}', length=5000), 1, "cut short"),
    "5000-digits": (lambda: body(b'{"schema": 1, "n": ' + b"9" * 5000 + b"}"), 2, "digits"),
    "100000-deep": (lambda: body(b"[" * 100_000 + b"]" * 100_000), 2, "nested too deeply"),
    "503": (lambda: status(503), 1, "the server answered 503 for"),
}


@pytest.mark.parametrize("fault", sorted(MANIFEST_FAULTS))
def test_every_manifest_fetch_failure_is_one_line_naming_its_cause(fault: str, tmp_path: Path, cfg: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fetch, "MAX_MANIFEST_BYTES", 1 << 20)
    monkeypatch.setattr(fetch, "DEADLINE_S", 1.5)
    route, code, needle = MANIFEST_FAULTS[fault]
    _wheel(tmp_path / "dist", "0.2.0+pt213cpu")
    with hostile_server(_published(tmp_path, "0.1.0+pt213cpu")) as server:
        server.routes["/kiln-index.json"] = route()
        run = _release(tmp_path / "dist", tmp_path / "site", server.url, cfg)
    _one_line(run, code, needle)
    assert not (tmp_path / "site" / "kiln-index.json").exists()


def test_a_503_on_one_wheel_is_the_servers_answer_not_a_mismatch(tmp_path: Path, cfg: Path) -> None:
    www = _published(tmp_path, "0.1.0+pt213cpu")
    (wheel,) = (www / "wheels").glob("*.whl")
    _wheel(tmp_path / "dist", "0.2.0+pt213cpu")
    with hostile_server(www) as server:
        server.routes[f"/wheels/{wheel.name}"] = status(503)
        run = _release(tmp_path / "dist", tmp_path / "site", server.url, cfg)
    _one_line(run, 1, "the server answered 503 for", wheel.name)
    assert "does not match its manifest" not in run.stderr


@pytest.fixture(scope="module")
def lying_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with hostile_server(tmp_path_factory.mktemp("lies")) as server:
        yield server


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(code=st.sampled_from([200, 200, 200, 204, 403, 404, 500, 502, 503]), size=st.integers(0, 3000),
       declared=st.sampled_from(["true", "more", "fewer", "huge"]), hops=st.integers(0, 7),
       to=st.sampled_from(["http", "ftp", "file", "data"]))
def test_any_answer_is_the_exact_body_or_one_line_with_exit_1_or_2(lying_server: Any, code: int, size: int,
                                                                     declared: str, hops: int, to: str) -> None:
    """Generated answers (status, a Content-Length that lies either way, redirect chains off http(s)): the fetch
    returns exactly what the server said, or fails with one line and exit 1 (a retry may help) or 2."""
    from kiln_tool.index.http_fetch import FetchFailure, http_get

    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    length = {"true": size, "more": size + 10, "fewer": max(size - 10, 0), "huge": 1 << 40}[declared]
    lying_server.routes.clear()
    lying_server.routes["/0"] = body(data, code, length)
    for hop in range(1, hops + 1):
        target = f"/{hop - 1}" if hop > 1 or to == "http" else f"{to}://127.0.0.1/x"
        lying_server.routes[f"/{hop}"] = redirect(target, 301 + hop % 2)
    try:
        answer = http_get(f"{lying_server.url}{hops}", max_bytes=2000, deadline_s=5)
    except FetchFailure as exc:
        message = str(exc)
        assert "\n" not in message and exc.exit_code in (1, 2), message
        if hops > 5:
            assert "redirects" in message
        elif to != "http" and hops:
            assert exc.exit_code == 2 and "only http(s) redirects" in message
        elif code != 200:
            assert f"answered {code}" in message and exc.exit_code == 1
        elif length > 2000:
            assert "limit" in message and exc.exit_code == 2
        else:
            assert declared == "more" and "cut short" in message and exc.exit_code == 1
        return
    assert code == 200 and hops <= 5 and (to == "http" or not hops) and length <= 2000 and declared != "more"
    assert answer.body == data[:length]


@pytest.fixture(scope="module")
def two_wheel_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _published(tmp_path_factory.mktemp("two"), "0.1.0+pt213cpu", "0.2.0+pt213cpu")


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_a_manifest_with_a_duplicated_key_anywhere_is_refused(tmp_path_factory: pytest.TempPathFactory,
                                                               two_wheel_site: Path, data: st.DataObject) -> None:
    """Last-one-wins would drop wheels: a key twice in any object of the fetched manifest is exit 2, named."""
    tmp = tmp_path_factory.mktemp("dup")
    www = two_wheel_site
    doc = json.loads((www / "kiln-index.json").read_text())
    where = data.draw(st.sampled_from(["top", *range(len(doc["wheels"]))]), label="object")
    obj = doc if where == "top" else doc["wheels"][where]
    key = data.draw(st.sampled_from(sorted(obj)), label="key")
    value = data.draw(st.sampled_from([obj[key], [], None, "x", 0]), label="second value")
    text = json.dumps(obj)
    twice = text[:-1] + f", {json.dumps(key)}: {json.dumps(value)}}}"
    raw = json.dumps(doc).replace(text, twice, 1) if where != "top" else twice
    with hostile_server(www) as server:
        server.routes["/kiln-index.json"] = body(raw.encode())
        with pytest.raises(fetch.FetchError) as caught:
            fetch.fetch_site(server.url, tmp / "site")
    assert caught.value.exit_code == 2 and "appears twice" in str(caught.value)


# -- class 1: a ledger that only extends -------------------------------------------------------------------------

@pytest.mark.parametrize("kept", [0, 1])
def test_a_stale_manifest_is_refused_and_caches_are_asked_for_a_fresh_copy(kept: int, tmp_path: Path,
                                                                          cfg: Path) -> None:
    """The CDN serves an older kiln-index.json than the live pages: the release would drop a published wheel."""
    www = _published(tmp_path, *["0.1.0+pt213cpu", "0.2.0+pt213cpu"][:kept], "0.3.0+pt213cpu")
    stale = json.loads((www / "kiln-index.json").read_text())
    stale["wheels"] = stale["wheels"][:kept]
    _wheel(tmp_path / "dist", "0.4.0+pt213cpu")
    with hostile_server(www) as server:
        if kept:
            server.routes["/kiln-index.json"] = body(json.dumps(stale).encode())
        else:
            server.routes["/kiln-index.json"] = status(404)  # no manifest at all, but pages are live
        extra = ("--first-release",) if not kept else ()
        run = _release(tmp_path / "dist", tmp_path / "site", server.url, cfg, *extra)
    _one_line(run, 1, "0.3.0")
    assert "live pages" in run.stderr
    asked = [headers for path, headers in server.seen if path == "/kiln-index.json"]
    assert asked and all(h.get("cache-control") == "no-cache" for h in asked)


def test_a_name_another_releases_assets_hold_is_never_given_other_bytes(tmp_path: Path, cfg: Path) -> None:
    """v1's upload of X was never listed (an interrupted release); v2 brings X with other bytes: refused."""
    repository = "opkiln/opkiln"
    with release_assets(tmp_path) as assets, hostile_server(tmp_path / "empty-site") as pages:
        (tmp_path / "empty-site").mkdir(exist_ok=True)
        first = _wheel(tmp_path / "v1", "0.1.0+pt213cpu", extra_files={"opkiln/a.py": b"a = 1\n"})
        v1 = assets.release_dir(repository, "v1")
        v1.mkdir(parents=True)
        shutil.copy(first, v1 / first.name)
        _wheel(tmp_path / "dist", "0.1.0+pt213cpu", extra_files={"opkiln/a.py": b"a = 2\n"})
        gh_cfg = tmp_path / "gh.json"
        gh_cfg.write_text(json.dumps({"backend": "github-release"}))
        with environment(assets.env()):
            run = kiln("release", tmp_path / "dist", tmp_path / "site", "--base-url", pages.url, "--published",
                       pages.url, "--first-release", "--storage", gh_cfg, "--repository", repository, "--tag", "v2")
        _one_line(run, 1, "the release v1 of opkiln/opkiln already holds this name")
        assert not assets.release_dir(repository, "v2").exists() or \
            not list(assets.release_dir(repository, "v2").iterdir())


def test_a_name_the_live_site_folder_serves_is_never_given_other_bytes(tmp_path: Path, cfg: Path) -> None:
    """wheels/X is live (a merge cut short moved it in before any page listed it), the manifest does not list X:
    a release of X with other bytes is refused; with the same bytes it is the same wheel."""
    www = _published(tmp_path, "0.1.0+pt213cpu")
    there = _wheel(tmp_path / "there", "0.2.0+pt213cpu", extra_files={"opkiln/a.py": b"a = 1\n"})
    shutil.copy(there, www / "wheels" / there.name)
    _wheel(tmp_path / "dist", "0.2.0+pt213cpu", extra_files={"opkiln/a.py": b"a = 2\n"})
    with hostile_server(www) as server:
        run = _release(tmp_path / "dist", tmp_path / "site", server.url, cfg)
        _one_line(run, 1, "the live site already serves", there.name)
        same = _release(there.parent, tmp_path / "site2", server.url, cfg)
        assert same.code == 0, same.stderr


def test_a_release_that_another_deployed_over_meanwhile_is_refused(tmp_path: Path, cfg: Path) -> None:
    """Another release deploys while this one runs: deploying this SITE would drop that release's wheel."""
    www = _published(tmp_path, "0.1.0+pt213cpu")
    before = (www / "kiln-index.json").read_bytes()
    other = _published(tmp_path / "other", "0.1.0+pt213cpu", "0.2.0+pt213cpu")
    _wheel(tmp_path / "dist", "0.3.0+pt213cpu")
    with hostile_server(www) as server:
        answers = iter([body(before)])

        def then_the_other_release(handler: http.server.BaseHTTPRequestHandler) -> None:
            next(answers, body((other / "kiln-index.json").read_bytes()))(handler)

        server.routes["/kiln-index.json"] = then_the_other_release
        run = _release(tmp_path / "dist", tmp_path / "site", server.url, cfg)
    _one_line(run, 1, "changed during this release")
    assert not (tmp_path / "site").exists() or not any((tmp_path / "site").iterdir())


@pytest.fixture(scope="module")
def moto() -> Iterator[Any]:
    """One moto S3 server for this module (each test its own prefix)."""
    with s3_server() as s3:
        yield s3


def test_two_releases_built_on_one_state_never_both_pass(tmp_path: Path, cfg: Path, moto: Any) -> None:
    """Both finish before either deploys (no concurrency group): whichever deploys last would drop the other's
    wheel. The bucket's conditional write decides: the second is refused, and its rerun after the first deploys
    lists both."""
    www = _published(tmp_path, "0.1.0+pt213cpu")
    with ExitStack() as stack:
        server = stack.enter_context(hostile_server(www))
        s3_cfg = tmp_path / "s3.json"
        s3_cfg.write_text(json.dumps(moto.config(prefix="race/")))
        stack.enter_context(environment({**os.environ, **S3_CREDENTIALS}))
        runs = []
        for name, version in (("a", "0.2.0+pt213cpu"), ("b", "0.3.0+pt213cpu")):
            _wheel(tmp_path / f"dist-{name}", version)
            runs.append(_release(tmp_path / f"dist-{name}", tmp_path / f"site-{name}", server.url, s3_cfg))
        assert runs[0].code == 0, runs[0].stderr
        _one_line(runs[1], 1, "another release already built on the same published state")
        assert not (tmp_path / "site-b").exists()
        again = _release(tmp_path / "dist-a", tmp_path / "site-a2", server.url, s3_cfg)
        assert again.code == 0, again.stderr  # the same release again holds its claim
        shutil.rmtree(www)
        shutil.copytree(tmp_path / "site-a", www)  # a deploys
        rerun = _release(tmp_path / "dist-b", tmp_path / "site-b", server.url, s3_cfg)
        assert rerun.code == 0, rerun.stderr
    listed = {w["version"] for w in json.loads((tmp_path / "site-b" / "kiln-index.json").read_text())["wheels"]}
    assert listed == {"0.1.0+pt213cpu", "0.2.0+pt213cpu", "0.3.0+pt213cpu"}


# -- class 3: one snapshot of DIST ------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["fifo", "symlink"])
def test_every_command_refuses_a_non_regular_wheel_alike_before_opening_it(kind: str, tmp_path: Path,
                                                                          cfg: Path) -> None:
    dist = tmp_path / "dist"
    real = _wheel(tmp_path / "elsewhere", "0.1.0+pt213cpu")
    _wheel(dist, "0.2.0+pt213cpu")
    odd = dist / real.name
    if kind == "fifo":
        os.mkfifo(odd)
    else:
        odd.symlink_to(real)
    what = "a FIFO" if kind == "fifo" else "a symbolic link"
    runs = {
        # subprocesses with a timeout: a command that opens the FIFO blocks forever
        "index": kiln_subprocess("index", dist, tmp_path / "out", timeout=120),
        "release": kiln_subprocess("release", dist, tmp_path / "site", "--base-url", BASE, "--first-release",
                                   "--published", "http://127.0.0.1:9/", "--storage", cfg, timeout=120),
    }
    for command, run in runs.items():
        _one_line(run, 2, f"{real.name!r}: not a wheel file ({what};")
        assert not (tmp_path / ("out" if command == "index" else "site")).exists() or \
            not any((tmp_path / "site").iterdir()), command


KINDS = ("wheel", "symlink", "fifo", "folder", "socket", "dangling")


def _place(dist: Path, kind: str, name: str, real: Path) -> None:
    path = dist / name
    if kind == "wheel":
        shutil.copy(real, path)
    elif kind == "symlink":
        path.symlink_to(real)
    elif kind == "dangling":
        path.symlink_to(dist / "nowhere")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    else:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(path))


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=5))
def test_both_commands_refuse_the_same_entries_with_the_same_lines(tmp_path_factory: pytest.TempPathFactory,
                                                                   kinds: list[str], cfg: Path) -> None:
    tmp = tmp_path_factory.mktemp("kinds")
    dist = tmp / "dist"
    dist.mkdir()
    for i, kind in enumerate(kinds):
        real = _wheel(tmp / f"real{i}", f"0.{i + 1}.0+pt213cpu")
        _place(dist, kind, real.name, real)
    index = kiln("index", dist, tmp / "out")
    release = kiln("release", dist, tmp / "site", "--base-url", BASE, "--first-release", "--published",
                   "http://127.0.0.1:9/", "--storage", cfg)
    refused = [line for line in index.stderr.splitlines() if "not a wheel file" in line]
    assert len(refused) == sum(kind != "wheel" for kind in kinds), index.stderr
    if refused:
        _one_line(index, 2)
        _one_line(release, 2)
        assert refused == [line for line in release.stderr.splitlines() if "not a wheel file" in line]
        assert not (tmp / "out").exists() and not (tmp / "site").exists()
    else:
        assert index.code == 0, index.stderr


def test_a_wheel_that_lands_in_dist_mid_release_is_not_published(tmp_path: Path, cfg: Path) -> None:
    """It arrives during the fetch, tagged below the release floor (`--release` would refuse it)."""
    www = _published(tmp_path, "0.1.0+pt213cpu")
    dist = tmp_path / "dist"
    audited = _wheel(dist, "0.2.0+pt213cpu")
    late = make_wheel(tmp_path / "late", version="0.3.0+pt213cpu", platform="linux_x86_64")
    with hostile_server(www) as server:
        served = body((www / "kiln-index.json").read_bytes())

        def arrive_then_serve(handler: http.server.BaseHTTPRequestHandler) -> None:
            shutil.copy(late, dist / late.name)
            served(handler)

        server.routes["/kiln-index.json"] = arrive_then_serve
        run = _release(dist, tmp_path / "site", server.url, cfg)
    assert run.code == 0, run.stderr
    listed = {w["filename"]: w["sha256"] for w in json.loads((tmp_path / "site" / "kiln-index.json").read_text())
              ["wheels"]}
    assert late.name not in listed
    assert listed[audited.name] == hashlib.sha256(audited.read_bytes()).hexdigest()


# -- class 4: our own retry ---------------------------------------------------------------------------------------

@contextmanager
def losing_proxy(upstream: str) -> Iterator[str]:
    """Forwards everything to ``upstream``; the answer to the first PUT of a wheel is lost (the object is stored)."""
    host, port = upstream.removeprefix("http://").split(":")
    lost: list[str] = []

    class Proxy(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            data = self.rfile.read(length) if length else b""
            conn = http.client.HTTPConnection(host, int(port), timeout=60)
            headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
            conn.request(self.command, self.path, body=data, headers=headers)
            answer = conn.getresponse()
            payload = answer.read()
            conn.close()
            if self.command == "PUT" and self.path.split("?")[0].endswith(".whl") and not lost:
                lost.append(self.path)
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            self.send_response(answer.status)
            for key, value in answer.getheaders():
                if key.lower() not in ("transfer-encoding", "connection", "content-length", "server", "date"):
                    self.send_header(key, value)
            self.send_header("Content-Length", answer.getheader("Content-Length", "0") if self.command == "HEAD"
                             else str(len(payload)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)

        do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = forward

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        assert lost, "the proxy never lost an answer: the test tested nothing"
        server.shutdown()
        server.server_close()


def test_a_put_whose_answer_was_lost_is_ours_not_a_conflict(tmp_path: Path, moto: Any) -> None:
    wheel = _wheel(tmp_path / "dist")
    with ExitStack() as stack:
        proxy = stack.enter_context(losing_proxy(moto.endpoint))
        config = {**moto.config(prefix="lost/"), "endpoint_url": proxy}
        with environment({**os.environ, **S3_CREDENTIALS}):
            storage = open_storage(config)
            result = build_index(tmp_path / "dist", tmp_path / "site", BASE, audit=None, storage=storage)
    assert [w.filename for w in result.added] == [wheel.name]


# -- class 5: bounds before copying, names no file system can install, a merge never half-seen ------------------

@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(parts=st.lists(st.integers(1, 300), min_size=1, max_size=16))
def test_a_path_no_linux_file_system_can_install_is_refused(tmp_path_factory: pytest.TempPathFactory,
                                                            parts: list[int]) -> None:
    """A component over NAME_MAX (255 bytes) or a path past PATH_MAX under site-packages: pip would fail with
    ENAMETOOLONG, so the wheel is refused, by rule, before anything is published."""
    tmp = tmp_path_factory.mktemp("long")
    member = "opkiln/" + "/".join("a" * n for n in parts) + ".py"
    fits = all(n <= 255 for n in parts[:-1]) and parts[-1] + 3 <= 255 and len(member) <= 3840
    _wheel(tmp / "dist", extra_files={member: b"x = 1\n"})
    run = kiln("index", tmp / "dist", tmp / "out")
    if fits:
        assert run.code == 0, run.stderr
    else:
        _one_line(run, 2, "bytes")
        assert "longer than 255 bytes" in run.stderr or "PATH_MAX" in run.stderr
        assert not (tmp / "out").exists()


@pytest.mark.parametrize("size", [64 << 20, 100 << 30])
def test_a_big_non_wheel_is_refused_before_a_byte_is_copied(size: int, tmp_path: Path, cfg: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A 64 MiB file that is no zip, and a sparse 100 GiB one: nothing is copied into staging."""
    def no_copy(*_args: object) -> None:
        raise AssertionError("a file was copied into staging before its bounds were checked")

    monkeypatch.setattr(publish_module, "copy_hashed", no_copy)
    dist = tmp_path / "dist"
    dist.mkdir()
    with (dist / f"opkiln-0.1.0+pt213cpu-cp311-cp311-{FLOOR}.whl").open("wb") as fh:
        fh.truncate(size)  # sparse: no disk used
    needle = "not a readable zip" if size < (1 << 30) else "larger than any wheel"
    _one_line(kiln("index", dist, tmp_path / "out"), 2, needle, "not copied")
    _one_line(kiln("release", dist, tmp_path / "site", "--base-url", BASE, "--first-release",
                   "--published", "http://127.0.0.1:9/", "--storage", cfg), 2, needle, "not copied")
    assert not (tmp_path / "out").exists()


def test_a_read_only_folder_met_by_a_merge_leaves_the_site_as_it_was(site: Path, tmp_path: Path) -> None:
    """No reader sees a state between two releases: a page listing the new wheel while the manifest does not."""
    folder = site / "cpu" / "torch2.13"
    if subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True).returncode != 0:
        pytest.skip("cannot bind-mount here")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], check=True, capture_output=True)
        before = tree(site)
        run = kiln("index", tmp_path / "dist", site)
        assert run.code == 2 and "nothing written" in run.stderr, run.stderr
        assert tree(site) == before
    finally:
        subprocess.run(["umount", str(folder)], check=False)
    assert kiln("index", tmp_path / "dist", site).code == 0
