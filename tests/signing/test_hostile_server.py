"""kiln verify against a hostile server on 127.0.0.1: an endless or oversized answer, a body dripped a byte at a
time, redirects off http(s) or in a loop. Each is a FAIL line naming the URL and the reason, bounded in bytes
and time; nothing passes."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kiln_tool.guard.signed import VerifyError, get_url
from signing.signed_sites import PRINCIPAL, Keys
from trust.kiln_runs import kiln


class Hostile(http.server.BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.path.startswith("/huge/"):
            self.send_response(200)
            self.send_header("Content-Length", str(1 << 40))
            self.end_headers()
            self.wfile.write(b"{" * 1024)
        elif self.path.startswith("/endless/"):
            self.send_response(200)
            self.end_headers()  # no length: read until the limit
            try:
                while True:
                    self.wfile.write(b" " * 65536)
            except OSError:
                pass
        elif self.path.startswith("/drip/"):
            self.send_response(200)
            self.send_header("Content-Length", "100")
            self.end_headers()
            try:
                for _ in range(100):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.2)
            except OSError:
                pass
        elif self.path.startswith("/file/"):
            self.send_response(302)
            self.send_header("Location", "file:///etc/passwd")
            self.end_headers()
        else:  # /loop/: redirects to itself forever
            self.send_response(302)
            self.send_header("Location", self.path)
            self.end_headers()


@pytest.fixture(scope="module")
def hostile() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(("index", "reason"), [
    ("huge/", "bytes, more than the 67108864 this file may have"),
    ("endless/", "more than the 67108864 bytes this file may have"),
    ("file/", "file:///etc/passwd: not an http(s) URL"),
    ("loop/", "too many redirects"),
])
def test_kiln_verify_refuses_a_hostile_index(hostile: str, keys: Keys, index: str, reason: str,
                                             tmp_path: Path) -> None:
    started = time.monotonic()
    run = kiln("verify", "--index", f"{hostile}{index}", "--allowed-signers", keys.allowed_signers, "--identity",
               PRINCIPAL, "--no-state", "--all")
    assert run.code == 1
    (line,) = [line for line in run.stdout.splitlines() if line.startswith("FAIL  kiln-release.json")]
    assert reason in line, line
    assert time.monotonic() - started < 60


def test_a_dripped_body_is_cut_off_at_the_deadline(hostile: str) -> None:
    started = time.monotonic()
    with pytest.raises(VerifyError, match=r"drip/kiln-release\.json: not served within 1 s \(cut off\)"):
        get_url(f"{hostile}drip/kiln-release.json", 1000, deadline_s=1.0)
    assert time.monotonic() - started < 5
