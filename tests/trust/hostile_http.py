"""A real HTTP server on 127.0.0.1 (http.server) that serves a folder, except where a route says otherwise:
stale copies, truncated bodies, drips, redirects, 503s. Every request's path and headers are kept."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

Route = Callable[[http.server.BaseHTTPRequestHandler], None]


@dataclass
class Hostile:
    url: str
    routes: dict[str, Route]
    seen: list[tuple[str, dict[str, str]]] = field(default_factory=list)


def body(data: bytes, status: int = 200, length: int | None = None) -> Route:
    """Answer ``data`` (a lying Content-Length when ``length`` is given), then close."""
    def answer(h: http.server.BaseHTTPRequestHandler) -> None:
        h.send_response(status)
        h.send_header("Content-Length", str(len(data) if length is None else length))
        h.end_headers()
        h.wfile.write(data)
        h.wfile.flush()
        h.close_connection = True
    return answer


def drip(data: bytes, every_s: float) -> Route:
    def answer(h: http.server.BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        for byte in data:
            try:
                h.wfile.write(bytes([byte]))
                h.wfile.flush()
            except OSError:
                return
            time.sleep(every_s)
    return answer


def redirect(location: str, status: int = 302) -> Route:
    def answer(h: http.server.BaseHTTPRequestHandler) -> None:
        h.send_response(status)
        h.send_header("Location", location)
        h.send_header("Content-Length", "0")
        h.end_headers()
    return answer


def status(code: int) -> Route:
    return body(b"", code)


@contextmanager
def hostile_server(root: Path) -> Iterator[Hostile]:
    routes: dict[str, Route] = {}
    seen: list[tuple[str, dict[str, str]]] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
            route = routes.get(self.path)
            if route is not None:
                route(self)
                return
            super().do_GET()

    def handler(*args: object, **kwargs: object) -> Handler:
        return Handler(*args, directory=str(root), **kwargs)  # type: ignore[arg-type]

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Hostile(url=f"http://127.0.0.1:{server.server_address[1]}/", routes=routes, seen=seen)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
