"""One bounded HTTP GET for everything a release reads from the network (index/fetch.py, index/storage.py).

Every fetch has a size cap (checked against Content-Length before the body, and against every byte read),
a total deadline (for the whole fetch, not per read: a body dripped a byte at a time ends at the deadline),
redirects followed only to http(s) URLs (at most a few), and asks caches for a fresh copy (Cache-Control:
no-cache). Every failure is a :class:`FetchFailure` whose message is one line naming its real cause and
whose ``exit_code`` says what a user can do: 1 where a retry may help (no answer, a 5xx, a cut connection,
a truncated body), 2 where the input is unusable as it is (too large, a redirect off http(s)).
"""

from __future__ import annotations

import http.client
import ssl
import time
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

_CHUNK = 1 << 16
MAX_REDIRECTS = 5
CONNECT_TIMEOUT_S = 30.0
RETRYABLE_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})


class FetchFailure(RuntimeError):
    """One line naming the cause; ``exit_code`` 1 (a retry may help) or 2 (unusable input)."""

    def __init__(self, message: str, exit_code: int = 1, status: int | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.status = status


@dataclass(frozen=True)
class Answer:
    url: str  # after redirects
    status: int
    body: bytes


def _shown(url: str) -> str:
    return url if len(url) <= 200 else url[:197] + "..."


def http_get(url: str, *, max_bytes: int, deadline_s: float, what: str = "",
             ok_status: frozenset[int] = frozenset({200})) -> Answer:
    """GET ``url``: the body of a 200 (or of a status in ``ok_status``, e.g. 404 for "not published yet")
    read to at most ``max_bytes``, all within ``deadline_s`` seconds; else FetchFailure."""
    end = time.monotonic() + deadline_s
    label = f"{what} " if what else ""
    current = url
    for _hop in range(MAX_REDIRECTS + 1):
        parts = urlsplit(current)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise FetchFailure(f"{label}{_shown(url)}: only http(s) URLs are fetched, not {_shown(current)}", 2)
        status, location, body = _one(current, parts.scheme, end, max_bytes, deadline_s, label)
        if status in (301, 302, 303, 307, 308):
            if not location:
                raise FetchFailure(f"{label}{_shown(current)}: the server answered {status} without a Location", 1)
            target = urljoin(current, location)
            if urlsplit(target).scheme not in ("http", "https"):
                raise FetchFailure(f"{label}{_shown(current)} redirects to {_shown(target)}: only http(s) "
                                   "redirects are followed", 2)
            current = target
            continue
        if status == 200 or status in ok_status:
            return Answer(current, status, body)
        raise FetchFailure(f"the server answered {status} for {_shown(current)}"
                           + (" (a retry may help)" if status in RETRYABLE_STATUS else ""), 1, status)
    raise FetchFailure(f"{label}{_shown(url)}: more than {MAX_REDIRECTS} redirects", 2)


def _one(url: str, scheme: str, end: float, max_bytes: int, deadline_s: float,
         label: str) -> tuple[int, str | None, bytes]:
    parts = urlsplit(url)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query

    def remaining() -> float:
        left = end - time.monotonic()
        if left <= 0:
            raise TimeoutError
        return left

    conn: http.client.HTTPConnection
    try:
        timeout = min(remaining(), CONNECT_TIMEOUT_S)
        if scheme == "https":
            conn = http.client.HTTPSConnection(parts.hostname or "", parts.port, timeout=timeout,
                                               context=ssl.create_default_context())
        else:
            conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout)
    except ValueError as exc:  # a bad port
        raise FetchFailure(f"{label}{_shown(url)}: not a usable URL ({exc})", 2) from None
    try:
        conn.request("GET", path, headers={"Cache-Control": "no-cache", "Pragma": "no-cache",
                                           "Accept-Encoding": "identity", "User-Agent": "kiln"})
        if conn.sock is not None:
            conn.sock.settimeout(remaining())
        response = conn.getresponse()
        if response.status in (301, 302, 303, 307, 308):
            return response.status, response.getheader("Location"), b""
        if response.status != 200:  # its body is not what was asked for: never read
            return response.status, None, b""
        declared = response.getheader("Content-Length")
        length: int | None = None
        if declared is not None:
            try:
                length = int(declared)
            except ValueError:
                raise FetchFailure(f"{label}{_shown(url)}: a malformed Content-Length {declared[:40]!r}", 1) from None
            if length > max_bytes:
                raise FetchFailure(f"{label}{_shown(url)} is {length} bytes, more than the limit of {max_bytes}; "
                                   "refused before reading it", 2)
        chunks: list[bytes] = []
        received = 0
        while True:
            if conn.sock is not None:
                conn.sock.settimeout(remaining())
            chunk = response.read1(_CHUNK)
            if not chunk:
                break
            received += len(chunk)
            if received > max_bytes:
                raise FetchFailure(f"{label}{_shown(url)}: more than the limit of {max_bytes} bytes; refused "
                                   "(stopped reading at the limit)", 2)
            chunks.append(chunk)
            remaining()
        if length is not None and received != length:
            raise FetchFailure(f"{label}{_shown(url)}: the body was cut short ({received} of the {length} bytes "
                               "its Content-Length announces); a retry may help", 1)
        return response.status, None, b"".join(chunks)
    except FetchFailure:
        raise
    except TimeoutError:
        raise FetchFailure(f"{label}{_shown(url)}: not fetched within {deadline_s:g} s (the whole fetch, not one "
                           "read); a retry may help", 1) from None
    except http.client.IncompleteRead as exc:
        raise FetchFailure(f"{label}{_shown(url)}: the body was cut short ({len(exc.partial)} bytes, then the "
                           "connection ended); a retry may help", 1) from None
    except ssl.SSLError as exc:
        raise FetchFailure(f"{label}{_shown(url)}: TLS failed ({exc.reason or exc})", 1) from None
    except http.client.HTTPException as exc:
        detail = " ".join(str(exc).split())[:120] or type(exc).__name__
        raise FetchFailure(f"{label}{_shown(url)}: the server's answer is not valid HTTP ({detail}); a retry "
                           "may help", 1) from None
    except OSError as exc:
        reason = exc.strerror or " ".join(str(exc).split())[:120] or type(exc).__name__
        raise FetchFailure(f"{label}{_shown(url)}: cannot reach the server ({reason}); a retry may help", 1) from None
    finally:
        conn.close()


__all__ = ["Answer", "FetchFailure", "http_get"]
