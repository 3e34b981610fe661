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
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from .errors import IndexInputError
from .http_fetch import FetchFailure, http_get
from .manifest import Manifest, parse_manifest, unique_keys

MANIFEST = "kiln-index.json"
WHEEL_DIR = "wheels"
SIMPLE_DIR = "simple"
MAX_MANIFEST_BYTES = 64 << 20  # 10,000 wheels are ~7 MiB of manifest
MAX_METADATA_BYTES = 8 << 20
MAX_PAGE_BYTES = 64 << 20
DEADLINE_S = 300.0  # one fetch, whole (the manifest, a page, one wheel)
_WHEEL_NAME = re.compile(r"^[A-Za-z0-9_.+!-]+\.whl$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_PROJECT_LINK = re.compile(r'<a href="([a-z0-9][a-z0-9._-]*)/">')
_WHEEL_LINK = re.compile(r'<a href="[^"#]*#sha256=([0-9a-f]{64})"[^>]*>([^<]+\.whl)</a>')


class FetchError(RuntimeError):
    exit_code = 1


class ManifestError(FetchError):
    exit_code = 2


def fetch_error(exc: FetchFailure) -> FetchError:
    error = FetchError(str(exc))
    error.exit_code = exc.exit_code
    return error


def read_manifest(raw: bytes, where: str) -> Manifest:
    """The strict reader (index/manifest.py) at fetch time: duplicate keys, huge numbers, deep nesting and every
    malformed entry are refused in one line naming the cause (exit 2)."""
    try:
        return parse_manifest(raw, where)
    except IndexInputError as exc:
        strict = str(exc)
    try:  # a document that is JSON but no kiln manifest: name its first broken entry, where it has one
        _wheel_entries(json.loads(raw.decode("utf-8"), object_pairs_hook=unique_keys))
    except ManifestError as exc:
        raise ManifestError(f"{where}: {exc}") from None
    except (ValueError, RecursionError):
        pass
    raise ManifestError(strict)


def _wheel_entries(manifest: Any) -> None:
    """The shape every manifest entry has had since the first kiln (the strict reader holds it to far more)."""
    if not isinstance(manifest, dict) or not isinstance(manifest.get("wheels"), list):
        raise ManifestError(f"{MANIFEST}: expected an object with a 'wheels' list")
    for i, entry in enumerate(manifest["wheels"]):
        try:
            name, sha, size, meta_sha = entry["filename"], entry["sha256"], entry["size"], entry["metadata_sha256"]
        except (KeyError, TypeError):
            raise ManifestError(f"{MANIFEST}: wheels[{i}] lacks filename, sha256, size or metadata_sha256") from None
        if not (isinstance(name, str) and _WHEEL_NAME.match(name)):
            raise ManifestError(f"{MANIFEST}: wheels[{i}]: {str(name)[:100]!r} is not a wheel file name")
        if not (isinstance(sha, str) and _SHA256.match(sha) and isinstance(meta_sha, str) and _SHA256.match(meta_sha)):
            raise ManifestError(f"{MANIFEST}: {name}: malformed sha256")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ManifestError(f"{MANIFEST}: {name}: malformed size {str(size)[:40]!r}")


def live_listing(base: str, projects: set[str], deadline_s: float = DEADLINE_S) -> dict[str, str] | None:
    """Every wheel the live pages list (simple/ index, PEP 503), by name, with the sha256 its link states;
    None when the site serves no simple index (nothing published there yet)."""
    answer = http_get(f"{base}{SIMPLE_DIR}/index.html", max_bytes=MAX_PAGE_BYTES, deadline_s=deadline_s,
                      what="the live simple index", ok_status=frozenset({404}))
    if answer.status == 404:
        return None
    found: dict[str, str] = {}
    text = answer.body.decode("utf-8", "replace")
    for project in sorted(projects | set(_PROJECT_LINK.findall(text))):
        page = http_get(f"{base}{SIMPLE_DIR}/{project}/index.html", max_bytes=MAX_PAGE_BYTES, deadline_s=deadline_s,
                        what="a live page", ok_status=frozenset({404}))
        for digest, name in _WHEEL_LINK.findall(page.body.decode("utf-8", "replace")):
            found[unquote(name)] = digest
    return found


def check_against_live(manifest: Manifest | None, live: dict[str, str] | None, where: str) -> None:
    """The fetched manifest must list every wheel the live pages list, with the same sha256: a release never
    lists less than is published (a stale cache or CDN copy of the manifest is refused, exit 1: retry later)."""
    if not live:
        return
    listed = manifest.wheels if manifest is not None else {}
    lost = sorted(name for name in live if name not in listed)
    other = sorted(name for name, digest in live.items() if name in listed and listed[name].sha256 != digest)
    if manifest is None:
        raise FetchError(f"{where}: no manifest, but the live pages list {len(live)} wheel(s) ({', '.join(lost[:3])}"
                         f"{', ...' if len(lost) > 3 else ''}); refusing to start an empty site over a published one")
    if lost or other:
        problems = [f"{name} (listed on the live pages, not in the fetched manifest)" for name in lost[:10]]
        problems += [f"{name} (the live pages state sha256 {live[name]}, the manifest {listed[name].sha256})"
                     for name in other[:10]]
        raise FetchError(f"{where} is older than the live pages (a stale cache or CDN copy?): the release would list "
                         f"less than is published; refusing (a retry once caches are fresh may help): "
                         + "; ".join(problems))


def published_manifest(base_url: str, deadline_s: float | None = None) -> bytes | None:
    """The live manifest's bytes as the site serves them now (asked fresh of caches); None when it has none."""
    where = base_url.rstrip("/") + "/" + MANIFEST
    try:
        answer = http_get(where, max_bytes=MAX_MANIFEST_BYTES, deadline_s=DEADLINE_S if deadline_s is None
                          else deadline_s, what="the published manifest", ok_status=frozenset({404}))
    except FetchFailure as exc:
        raise fetch_error(exc) from None
    return None if answer.status == 404 else answer.body


def fetch_site(base_url: str, out: Path, *, allow_missing: bool = False, stats: dict[str, int] | None = None,
               deadline_s: float | None = None, check_live: bool = True) -> int:
    """Fetch the manifest and its site-folder files into ``out``; returns how many wheels were fetched.
    ``stats`` (if given) gets "bytes" (everything downloaded), "listed" and "stored" (wheels not fetched).
    ``check_live``: the manifest must list every wheel the live pages (simple/) list."""
    stats = {} if stats is None else stats
    stats.update(bytes=0, listed=0, stored=0)
    deadline_s = DEADLINE_S if deadline_s is None else deadline_s
    base = base_url.rstrip("/") + "/"
    if out.exists() and any(out.iterdir()):
        raise ManifestError(f"{out} is not empty; fetch into a fresh directory")
    where = f"{base}{MANIFEST}"
    try:
        answer = http_get(where, max_bytes=MAX_MANIFEST_BYTES, deadline_s=deadline_s, what="the published manifest",
                          ok_status=frozenset({404}))
        if answer.status == 404:
            if not allow_missing:
                raise FetchError(f"{where}: HTTP 404 (pass --allow-missing only for the very first publication)")
            if check_live:
                check_against_live(None, live_listing(base, set(), deadline_s), where)
            out.mkdir(parents=True, exist_ok=True)
            return 0
        raw = answer.body
        manifest = read_manifest(raw, where)
        stats["bytes"] += len(raw)
        if check_live:
            check_against_live(manifest, live_listing(base, {w.project for w in manifest.wheels.values()},
                                                      deadline_s), where)
    except FetchFailure as exc:
        raise fetch_error(exc) from None
    entries = sorted(manifest.wheels.values(), key=lambda w: w.filename)
    stats["listed"] = len(entries)
    stats["stored"] = sum(1 for entry in entries if entry.url is not None)
    entries = [entry for entry in entries if entry.url is None]

    wheel_dir = out / WHEEL_DIR
    out.mkdir(parents=True, exist_ok=True)
    if entries:
        wheel_dir.mkdir(exist_ok=True)
    for entry in entries:
        for rel, digest, want_size in ((entry.filename, entry.sha256, entry.size),
                                       (f"{entry.filename}.metadata", entry.metadata_sha256, None)):
            url = f"{base}{WHEEL_DIR}/{rel}"
            limit = want_size if want_size is not None else MAX_METADATA_BYTES
            try:
                data = http_get(url, max_bytes=limit, deadline_s=deadline_s, what="a published file").body
            except FetchFailure as exc:
                if exc.status == 404:
                    raise FetchError(f"{url}: HTTP 404; the published site does not match its manifest") from None
                raise fetch_error(exc) from None
            if want_size is not None and len(data) != want_size:
                raise FetchError(f"{url}: {len(data)} bytes, the manifest says {want_size}")
            stats["bytes"] += len(data)
            if hashlib.sha256(data).hexdigest() != digest:
                raise FetchError(f"{url}: sha256 differs from the manifest")
            (wheel_dir / rel).write_bytes(data)
    _fetch_sdists(base, out, manifest, stats, deadline_s)
    (out / MANIFEST).write_bytes(raw)
    return len(entries)


def _fetch_sdists(base: str, out: Path, manifest: Manifest, stats: dict[str, int], deadline_s: float) -> None:
    """The sdists the manifest lists in the site folder (sdist/NAME), each checked by size and sha256."""
    from .sdists import SDIST_DIR

    for entry in sorted(manifest.sdists.values(), key=lambda s: s.filename):
        if entry.url is not None:
            continue
        url = f"{base}{SDIST_DIR}/{entry.filename}"
        try:
            data = http_get(url, max_bytes=entry.size, deadline_s=deadline_s, what="a published sdist").body
        except FetchFailure as exc:
            if exc.status == 404:
                raise FetchError(f"{url}: HTTP 404; the published site does not match its manifest") from None
            raise fetch_error(exc) from None
        if len(data) != entry.size or hashlib.sha256(data).hexdigest() != entry.sha256:
            raise FetchError(f"{url}: not the bytes the manifest records (size or sha256 differs)")
        stats["bytes"] += len(data)
        (out / SDIST_DIR).mkdir(exist_ok=True)
        (out / SDIST_DIR / entry.filename).write_bytes(data)


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
