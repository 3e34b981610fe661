"""The one release path: what release.yml's index job runs and `kiln release-rehearsal` runs the same way.

    1. record the ABI of every torch the wheels target that is neither recorded nor installed
       (`kiln torch-abi --for-wheels`: downloaded from the matrix's torch index, never installed);
    2. audit every wheel with the release rules (`kiln audit --release`: the release floor);
    3. fetch the published site: its manifest, and only the wheels that live in the site folder itself
       (each checked by sha256); wheels in storage (data/storage.json: release assets, a bucket) are not
       downloaded but checked against the storage's own listing; or start empty only for the first release;
    4. merge the wheels into it (`kiln index`: append-only, audited again, atomic): with a storage, each new
       wheel is uploaded (never over an existing name), read back by the storage's digest, then listed.

Any step that fails stops the release with its exit code; SITE then holds at most the fetched,
unchanged published site, never a half-merged one, and the storage at most uploaded-but-unlisted
wheels that the next run adopts (same bytes) or refuses (other bytes).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .index.storage import GhCli

Say = Callable[[str], None]


class ReleaseError(RuntimeError):
    def __init__(self, step: str, message: str, exit_code: int) -> None:
        super().__init__(f"{step}: {message}")
        self.step = step
        self.exit_code = exit_code


@dataclass(frozen=True)
class ReleaseResult:
    recorded: tuple[str, ...]
    added: tuple[str, ...]
    unchanged: tuple[str, ...]
    fetched: int
    downloaded_bytes: int = 0
    uploaded: tuple[str, ...] = ()


def _record_torch_abis(wheels: list[Path], say: Say) -> tuple[str, ...]:
    from .audit.torch_abi import data_dir
    from .torch_abi_records import record_needed_torches

    needed = record_needed_torches(wheels, data_dir())
    say(f"release: torch ABIs: {', '.join(needed) if needed else 'every target torch is recorded or installed'}")
    return tuple(needed)


def _audit(wheels: list[Path], say: Say) -> None:
    from .audit import AuditOptions, audit_paths
    from .audit.release_rule import release_rule

    report = audit_paths(wheels, AuditOptions(release=release_rule()))
    if not report.ok:
        sys.stdout.write(report.render_text())
        raise ReleaseError("audit", "a wheel fails the release audit (above); nothing was published", 1)
    say(f"release: {len(wheels)} wheel(s) pass the release audit")


def run_release(dist: Path, site: Path, base_url: str, published_url: str | None, *, first_release: bool,
                say: Say = print, storage_config: Path | None = None, repository: str | None = None,
                tag: str | None = None, gh: GhCli | None = None) -> ReleaseResult:
    """``storage_config``: data/storage.json when None (this repository: the release's assets); ``gh``: how
    gh is run (default: `gh` on PATH)."""
    from .index import KilnIndexError, build_index
    from .index.fetch import FetchError, fetch_site
    from .index.storage import load_config, open_storage

    wheels = sorted(dist.glob("*.whl"))
    if not wheels:
        raise ReleaseError("input", f"{dist} holds no wheel", 2)
    if published_url is None and not first_release:
        raise ReleaseError("input", "name the published site (--published URL); only the first release may "
                           "start from an empty one (--first-release)", 2)
    if site.exists() and any(site.iterdir()):
        raise ReleaseError("input", f"{site} is not empty: the release fetches the published site into it", 2)
    try:
        storage = open_storage(load_config(storage_config), repository=repository, tag=tag, gh=gh)
    except KilnIndexError as exc:
        raise ReleaseError("storage", str(exc), exc.exit_code) from None
    try:
        recorded = _record_torch_abis(wheels, say)
    except Exception as exc:
        raise ReleaseError("torch-abi", str(exc), 2) from None
    _audit(wheels, say)
    fetched = 0
    stats: dict[str, int] = {}
    if published_url is not None:
        try:
            fetched = fetch_site(published_url, site, allow_missing=first_release, stats=stats)
        except FetchError as exc:
            raise ReleaseError("fetch", str(exc), exc.exit_code) from None
        say(f"release: fetched {fetched} published wheel(s) from {published_url} ({stats['bytes']} bytes; "
            f"{stats['stored']} listed wheel(s) live in storage and were not downloaded)")
    else:
        site.mkdir(parents=True, exist_ok=True)
        say("release: first release: the site starts empty")
    try:
        # SITE holds the fetched manifest and no page, and is deployed whole: every page is rendered.
        result = build_index(dist, site, base_url, log=say, storage=storage, render_all=True)
    except KilnIndexError as exc:
        raise ReleaseError("index", str(exc), exc.exit_code) from None
    except OSError as exc:
        raise ReleaseError("index", f"cannot write the site: {exc}", 2) from None
    added = tuple(w.filename for w in result.added)
    for name in added:
        say(f"release: added {name}")
    uploaded = tuple(w.filename for w in result.added if w.url is not None)
    return ReleaseResult(recorded=recorded, added=added, unchanged=tuple(result.unchanged), fetched=fetched,
                         downloaded_bytes=stats.get("bytes", 0), uploaded=uploaded)
