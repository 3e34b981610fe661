"""The full verification of a published index, run on its own schedule (verify-index.yml), not by releases.

A release checks the wheels it lists against the storage's own listing (index/storage.py check_listed:
presence and size everywhere, and the sha256 release assets report); this checks every listed file's
sha256, one by one:

- wheels in S3: the object's ChecksumSHA256 (uploaded with it) by a HEAD each, else its bytes;
- release assets: the digest GitHub reports for each asset (one listing per tag);
- wheels in the site folder, and with --download every wheel and METADATA file: the bytes users are
  served (through the CDN, from the public URL), hashed here.

    python tools/verify_published.py PAGES_URL [--storage FILE] [--download]

Exit codes: 0 every file matches, 1 a file is missing or differs, 2 usage, an unreadable manifest or an
unreachable storage.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

from .errors import KilnIndexError
from .fetch import DEADLINE_S
from .http_fetch import FetchFailure, http_get
from .manifest import MANIFEST_NAME, Manifest, PublishedWheel, parse_manifest
from .sdists import SDIST_DIR, PublishedSdist
from .storage import Storage, Stored, load_config, open_storage

MAX_OBJECT_BYTES = 1 << 34  # past any wheel the archive limits allow (safezip.max_archive_bytes)


def _get(url: str) -> bytes | None:
    """The bytes at ``url``; None for HTTP 404. Bounded like every fetch (index/http_fetch.py)."""
    try:
        answer = http_get(url, max_bytes=MAX_OBJECT_BYTES, deadline_s=DEADLINE_S, ok_status=frozenset({404}))
    except FetchFailure as exc:
        error = KilnIndexError(str(exc))
        error.exit_code = exc.exit_code
        raise error from None
    return None if answer.status == 404 else answer.body


def _files(pages: str, wheel: PublishedWheel | PublishedSdist) -> list[tuple[str, str, str]]:
    """(object name, URL, sha256) of the wheel and, where it is served, its METADATA; or of an sdist."""
    if isinstance(wheel, PublishedSdist):
        return [(wheel.filename, wheel.url or f"{pages}{SDIST_DIR}/{quote(wheel.filename, safe='')}", wheel.sha256)]
    url = wheel.url or f"{pages}wheels/{quote(wheel.filename, safe='')}"
    files = [(wheel.filename, url, wheel.sha256)]
    if wheel.metadata_beside:
        files.append((f"{wheel.filename}.metadata", f"{url}.metadata", wheel.metadata_sha256))
    return files


def verify(pages: str, manifest: Manifest, storage: Storage | None, download: bool,
           say: Callable[[str], None] = print) -> list[str]:
    """Every problem found (empty: every listed file has its sha256)."""
    problems: list[str] = []
    listings: dict[str, dict[str, Stored] | None] = {}
    checked = 0
    listed: list[PublishedWheel | PublishedSdist] = [*manifest.wheels.values(), *manifest.sdists.values()]
    for wheel in sorted(listed, key=lambda w: w.filename):
        for name, url, sha256 in _files(pages, wheel):
            reported: str | None = None
            where = wheel.stored_at or "the site folder"
            if storage is not None and wheel.stored_at is not None:
                if wheel.stored_at.startswith("github-release:"):
                    if wheel.stored_at not in listings:
                        listings[wheel.stored_at] = storage.listing(wheel.stored_at)
                    listing = listings[wheel.stored_at]
                    found = listing.get(name) if listing is not None else None
                    if listing is not None and found is None:
                        problems.append(f"{name}: missing from {where}")
                        continue
                    reported = found.sha256 if found is not None else None
                elif wheel.stored_at.startswith(storage.where()):
                    stat = storage.stat(name)
                    if stat is None:
                        problems.append(f"{name}: missing from {where}")
                        continue
                    reported = stat.sha256
            if reported is not None and reported != sha256:
                problems.append(f"{name}: {where} reports sha256 {reported}, listed with {sha256}")
                continue
            if reported is None or download:
                data = _get(url)
                if data is None:
                    problems.append(f"{name}: {url} is HTTP 404")
                    continue
                if hashlib.sha256(data).hexdigest() != sha256:
                    problems.append(f"{name}: {url} serves sha256 {hashlib.sha256(data).hexdigest()}, listed with "
                                    f"{sha256}")
                    continue
            checked += 1
    say(f"verified {checked} file(s) of {len(manifest.wheels)} listed wheel(s); {len(problems)} problem(s)")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="verify_published", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("pages", help="public URL of the published site (its kiln-index.json is read)")
    parser.add_argument("--storage", type=Path, default=None, metavar="FILE",
                        help="the wheels' storage (default: data/storage.json)")
    parser.add_argument("--repository", default=None, help="github-release storage: OWNER/NAME")
    parser.add_argument("--download", action="store_true",
                        help="also download every file from its public URL and hash it (what users are served)")
    args = parser.parse_args(argv)
    pages = args.pages if args.pages.endswith("/") else args.pages + "/"
    try:
        raw = _get(pages + MANIFEST_NAME)
        if raw is None:
            raise KilnIndexError(f"{pages}{MANIFEST_NAME}: HTTP 404 (nothing published?)")
        manifest = parse_manifest(raw, pages + MANIFEST_NAME)
        config = load_config(args.storage)
        storage = open_storage(config, repository=args.repository, tag="verify") \
            if config["backend"] != "site" else None
        problems = verify(pages, manifest, storage, args.download)
    except KilnIndexError as exc:
        print(f"verify_published: {exc}", file=sys.stderr)
        return 2
    for problem in problems:
        print(f"verify_published: {problem}", file=sys.stderr)
    return 1 if problems else 0


__all__ = ["main", "verify"]
