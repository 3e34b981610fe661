"""The published state as a ledger a release can only extend: a new wheel's name must be free everywhere the
storage keeps wheels, not only where this release writes.

A name is published once some storage holds it: the site folder of the live site (wheels/NAME), any release's
assets of the repository (every tag, not only this release's: installers find a wheel by its name on the
pages, whichever tag holds it), or the bucket. A release that would publish such a name with other bytes is
refused (exit 1) before anything is uploaded; the same bytes are the same wheel.
The fetched manifest itself is checked against the live pages when it is fetched (index/fetch.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

from .errors import IndexConflictError
from .fetch import DEADLINE_S, FetchError, fetch_error
from .http_fetch import FetchFailure, http_get
from .manifest import load_manifest
from .storage import GitHubReleaseStorage, Storage


def check_names_free(storage: Storage | None, hashes: Mapping[str, str], site: Path,
                     published_url: str | None, deadline_s: float | None = None,
                     sdists: Mapping[str, str] | None = None) -> None:
    """Every wheel of ``hashes`` (name -> sha256), and every sdist of ``sdists``, that the fetched manifest in
    ``site`` does not list must not be held with other bytes by the live site folder (storage None: wheels/NAME,
    sdist/NAME) or by any release of the repository."""
    from .sdists import SDIST_DIR

    deadline_s = DEADLINE_S if deadline_s is None else deadline_s
    manifest = load_manifest(site)
    listed = set(manifest.wheels) | set(manifest.sdists) if manifest is not None else set()
    new = {name: digest for name, digest in {**hashes, **(sdists or {})}.items() if name not in listed}
    if not new:
        return
    clashes: list[str] = []
    if storage is None:
        if published_url is None:
            return
        base = published_url.rstrip("/") + "/"
        for name, digest in sorted(new.items()):
            url = f"{base}{SDIST_DIR if name.endswith('.tar.gz') else 'wheels'}/{name}"
            try:
                answer = http_get(url, max_bytes=1 << 34, deadline_s=deadline_s, what="a published name",
                                  ok_status=frozenset({404}))
            except FetchFailure as exc:
                raise _as_index_error(fetch_error(exc)) from None
            if answer.status == 200 and hashlib.sha256(answer.body).hexdigest() != digest:
                clashes.append(f"{name}: the live site already serves {url} with other bytes")
    elif isinstance(storage, GitHubReleaseStorage):
        for tag in storage.gh.releases(storage.repository):
            if tag == storage.tag:
                continue  # this release's own assets: plan_uploads adopts or refuses them
            held = storage.listing(f"github-release:{storage.repository}@{tag}") or {}
            for name, digest in sorted(new.items()):
                found = held.get(name)
                if found is not None and found.sha256 != digest:
                    clashes.append(f"{name}: the release {tag} of {storage.repository} already holds this name with "
                                   f"other bytes (sha256 {found.sha256 or 'not reported'})")
    if clashes:
        raise IndexConflictError("refusing to publish: a name the storage already holds is never given other bytes "
                                 "(bump the version instead):\n  " + "\n  ".join(clashes))


def _as_index_error(exc: FetchError) -> IndexConflictError:
    error = IndexConflictError(str(exc))
    error.exit_code = exc.exit_code
    return error


__all__ = ["check_names_free"]
