"""Fetch what the published wheel site holds, so `kiln index` merges onto it.

A GitHub Pages deployment replaces the whole site, so a release must start from
everything the site folder published before: the manifest (kiln-index.json) and
every wheel and METADATA file it lists *in the site folder*, each checked against
the sha256 the manifest records. A wheel the manifest lists with a storage URL
(index/storage.py: release assets, a bucket) is not fetched: it stays where it is,
and the release checks it against the storage's own listing. A site whose wheels
all live in storage is fetched as its manifest alone.
The HTML pages are not fetched; `kiln index` renders them from the manifest.

    python tools/fetch_published_site.py URL OUT_DIR [--allow-missing]
    (and `kiln release`, which runs fetch_site before it merges)

--allow-missing: a site without kiln-index.json (HTTP 404) counts as "nothing
published yet" and OUT_DIR is left empty. Without it that is an error: a release
must never silently start a new index over an old one.

Exit codes: 0 fetched, 1 the site could not be fetched or does not match its
manifest, 2 usage or a malformed manifest.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

MANIFEST = "kiln-index.json"
WHEEL_DIR = "wheels"
_WHEEL_NAME = re.compile(r"^[A-Za-z0-9_.+!-]+\.whl$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
TIMEOUT_S = 60


class FetchError(RuntimeError):
    exit_code = 1


class ManifestError(FetchError):
    exit_code = 2


def _get(url: str) -> bytes:
    if not url.startswith(("https://", "http://")):
        raise ManifestError(f"{url}: only http(s) URLs are fetched")
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:  # noqa: S310 - scheme checked above
        data: bytes = response.read()
    return data


def _wheel_entries(manifest: Any) -> list[tuple[str, str, int, str, bool]]:
    if not isinstance(manifest, dict) or not isinstance(manifest.get("wheels"), list):
        raise ManifestError(f"{MANIFEST}: expected an object with a 'wheels' list")
    entries = []
    for i, entry in enumerate(manifest["wheels"]):
        try:
            name, sha, size, meta_sha = entry["filename"], entry["sha256"], entry["size"], entry["metadata_sha256"]
        except (KeyError, TypeError):
            raise ManifestError(f"{MANIFEST}: wheels[{i}] lacks filename, sha256, size or metadata_sha256") from None
        if not (isinstance(name, str) and _WHEEL_NAME.match(name)):
            raise ManifestError(f"{MANIFEST}: wheels[{i}]: {name!r} is not a wheel file name")
        if not (isinstance(sha, str) and _SHA256.match(sha) and isinstance(meta_sha, str) and _SHA256.match(meta_sha)):
            raise ManifestError(f"{MANIFEST}: {name}: malformed sha256")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ManifestError(f"{MANIFEST}: {name}: malformed size {size!r}")
        entries.append((name, sha, size, meta_sha, entry.get("url") is not None))
    return entries


def fetch_site(base_url: str, out: Path, *, allow_missing: bool = False, stats: dict[str, int] | None = None) -> int:
    """Fetch the manifest and its site-folder files into ``out``; returns how many wheels were fetched.
    ``stats`` (if given) gets "bytes" (everything downloaded), "listed" and "stored" (wheels not fetched)."""
    stats = {} if stats is None else stats
    stats.update(bytes=0, listed=0, stored=0)
    base = base_url.rstrip("/") + "/"
    if out.exists() and any(out.iterdir()):
        raise ManifestError(f"{out} is not empty; fetch into a fresh directory")
    try:
        raw = _get(base + MANIFEST)
    except urllib.error.HTTPError as exc:
        if exc.code == 404 and allow_missing:
            out.mkdir(parents=True, exist_ok=True)
            return 0
        hint = " (pass --allow-missing only for the very first publication)" if exc.code == 404 else ""
        raise FetchError(f"{base}{MANIFEST}: HTTP {exc.code}{hint}") from None
    except urllib.error.URLError as exc:
        raise FetchError(f"{base}{MANIFEST}: {exc.reason}") from None
    try:
        manifest = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{base}{MANIFEST} is not JSON: {exc}") from None
    stats["bytes"] += len(raw)
    entries = _wheel_entries(manifest)
    stats["listed"] = len(entries)
    stats["stored"] = sum(1 for entry in entries if entry[4])
    entries = [entry for entry in entries if not entry[4]]

    wheel_dir = out / WHEEL_DIR
    out.mkdir(parents=True, exist_ok=True)
    if entries:
        wheel_dir.mkdir(exist_ok=True)
    for name, sha, size, meta_sha, _stored in entries:
        for rel, digest, want_size in ((name, sha, size), (f"{name}.metadata", meta_sha, None)):
            url = f"{base}{WHEEL_DIR}/{rel}"
            try:
                data = _get(url)
            except urllib.error.HTTPError as exc:
                raise FetchError(f"{url}: HTTP {exc.code}; the published site does not match its manifest") from None
            except urllib.error.URLError as exc:
                raise FetchError(f"{url}: {exc.reason}") from None
            if want_size is not None and len(data) != want_size:
                raise FetchError(f"{url}: {len(data)} bytes, the manifest says {want_size}")
            stats["bytes"] += len(data)
            if hashlib.sha256(data).hexdigest() != digest:
                raise FetchError(f"{url}: sha256 differs from the manifest")
            (wheel_dir / rel).write_bytes(data)
    (out / MANIFEST).write_bytes(raw)
    return len(entries)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fetch_published_site", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("url", help="public URL of the published site")
    parser.add_argument("out", type=Path, help="empty or missing directory to fetch into")
    parser.add_argument("--allow-missing", action="store_true",
                        help="no published site yet (HTTP 404 for its manifest) is fine: leave OUT empty")
    args = parser.parse_args(argv)
    try:
        count = fetch_site(args.url, args.out, allow_missing=args.allow_missing)
    except FetchError as exc:
        print(f"fetch_published_site: {exc}", file=sys.stderr)
        return exc.exit_code
    if not (args.out / MANIFEST).exists():
        print(f"{args.url}: nothing published yet; {args.out} starts empty")
    else:
        print(f"{args.url}: fetched {count} published wheel(s) into {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
