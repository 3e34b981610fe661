"""The one release path: what release.yml's index job runs and `kiln release-rehearsal` runs the same way.

    0. take one snapshot of DIST (regular files only, each within the archive bounds, copied once and hashed):
       every later step reads these copies, so what is audited is what is published;
    1. record the ABI of every torch the wheels target that is neither recorded nor installed
       (`kiln torch-abi --for-wheels`: downloaded from the matrix's torch index, never installed);
    2. audit every wheel with the release rules (`kiln audit --release`: the release floor);
    3. fetch the published site (bounded: index/http_fetch.py): its manifest, read strictly and checked against
       the live pages (a stale cached copy is refused), and only the wheels that live in the site folder itself
       (each checked by sha256); wheels in storage (data/storage.json: release assets, a bucket) are not
       downloaded but checked against the storage's own listing; or start empty only for the first release;
    4. a new wheel's name must be free everywhere wheels live (index/ledger.py: every release's assets, the live
       site folder) unless held with the very bytes;
    5. merge the snapshot into it (`kiln index`: append-only, atomic, exactly the audited bytes): with a storage,
       each new wheel is uploaded (never over an existing name), read back by the storage's digest, then listed;
       with a signer (checked before step 0; a signed published index takes no unsigned release), the next
       release manifest is signed into SITE beside the published chain and put beside the wheels
       (kiln_tool.signing, docs/verifying.md);
    6. where the storage can decide between racing writers (a bucket), claim the published state built on; then
       check that the live manifest is still the one built on (else another release deployed meanwhile).

Any step that fails stops the release with its exit code; SITE then holds at most the fetched,
unchanged published site, never a half-merged one (empty after a lost race), and the storage at most
uploaded-but-unlisted wheels that the next run adopts (same bytes) or refuses (other bytes).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from .index.storage import GhCli
    from .signing import PublishedChain, Putter, Signer

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


_BUILD_INFO_LIMIT = 1024 * 1024


def _dirty_commit(wheel: Path) -> str | None:
    """The commit a wheel's build info names when it also says the tree differed from it (git_dirty: true);
    None for a clean or unknown tree, or a wheel whose build info cannot be read (the audit judges those)."""
    import json
    import zipfile

    try:
        with zipfile.ZipFile(wheel) as zf:
            infos = [i for i in zf.infolist() if i.filename.count("/") == 1
                     and i.filename.endswith("/_build_info.json") and ".dist-info/" not in i.filename]
            if len(infos) != 1 or infos[0].file_size > _BUILD_INFO_LIMIT:
                return None
            info = json.loads(zf.read(infos[0]))
    except (OSError, ValueError, zipfile.BadZipFile, KeyError, RuntimeError):
        return None
    if not isinstance(info, dict) or info.get("git_dirty") is not True:
        return None
    commit = info.get("git_commit")
    return commit[:12] if isinstance(commit, str) and commit.isprintable() else "unknown"


def _refuse_dirty(wheels: list[Path]) -> None:
    dirty = [(w.name, c) for w in wheels if (c := _dirty_commit(w)) is not None]
    if dirty:
        names = "; ".join(f"{name} (commit {commit} plus uncommitted changes)" for name, commit in dirty)
        raise ReleaseError("dirty", f"built from a tree that differed from its commit: {names}. A release wheel "
                           "must be rebuilt from its commit alone: commit (or discard) the changes, then build "
                           "again; nothing was published", 1)


def _audit(wheels: list[Path], dist: Path, say: Say) -> None:
    from .audit import AuditInputError, AuditOptions, audit_paths
    from .audit.release_rule import release_rule

    try:
        report = audit_paths(wheels, AuditOptions(release=release_rule()))
    except AuditInputError as exc:
        raise ReleaseError("audit", f"the audit cannot read a wheel: {exc}", 2) from None
    if not report.ok:
        sys.stdout.write(report.render_text().replace(str(wheels[0].parent), str(dist)))
        raise ReleaseError("audit", "a wheel fails the release audit (above); nothing was published", 1)
    say(f"release: {len(wheels)} wheel(s) pass the release audit")


def snapshot_dist(dist: Path, into: Path) -> dict[str, str]:
    """One snapshot of DIST, taken before anything else reads it: regular files only (a link, FIFO, device or
    folder is refused as `kiln index` refuses it, before anything opens it), each checked against the archive
    bounds before a byte is copied, copied once into ``into`` and hashed while copied. Everything after (the
    torch ABIs, the release audit, staging, upload, listing) reads these copies: a wheel that lands in DIST
    later, or a file changed after, is not published. Returns name -> sha256."""
    from .index import IndexInputError
    from .index.publish import copy_checked, list_dist, open_regular, unusable_dist

    try:
        paths, problems = list_dist(dist)
    except IndexInputError as exc:
        raise ReleaseError("input", str(exc), 2) from None
    if problems:
        raise ReleaseError("input", str(unusable_dist(dist, problems)), 2)
    if not paths:
        raise ReleaseError("input", f"{dist} holds no wheel", 2)
    hashes: dict[str, str] = {}
    for path, _parsed in paths:
        try:
            fd = open_regular(path)
        except IndexInputError as exc:
            problems.append(str(exc))
            continue
        with os.fdopen(fd, "rb") as fh:
            try:
                hashes[path.name] = copy_checked(fh, path.name, into / path.name)[0]
            except IndexInputError as exc:
                problems.append(str(exc))
    if problems:
        raise ReleaseError("input", str(unusable_dist(dist, problems)), 2)
    return hashes


def snapshot_sdists(sdists: Sequence[Path], into: Path) -> dict[str, str]:
    """The release's sdists (`--sdist`), copied once and checked (index/sdists.py: this project's, unlabelled, one
    per version) before anything is audited, fetched or uploaded. Returns name -> sha256."""
    from .index import IndexInputError
    from .index.publish import copy_hashed, open_regular
    from .index.sdists import inspect_sdist, version_key
    from .kiln_wheel import served

    hashes: dict[str, str] = {}
    versions: dict[object, str] = {}
    problems: list[str] = []
    for path in sdists:
        if path.name in hashes:
            problems.append(f"{path.name}: given twice")
            continue
        try:
            with os.fdopen(open_regular(path), "rb") as fh:
                sha256, size = copy_hashed(fh, into / path.name)
            sdist = inspect_sdist(path.name, into / path.name, sha256, size, served()[0])
        except (IndexInputError, FileExistsError) as exc:
            problems.append(f"--sdist {path}: {exc}")
            continue
        twin = versions.get(version_key(sdist.version))
        if twin is not None:
            problems.append(f"{path.name} and {twin}: two sdists of version {sdist.version}; one per version")
            continue
        versions[version_key(sdist.version)] = path.name
        hashes[path.name] = sha256
    if problems:
        raise ReleaseError("input", f"unusable sdist: {problems[0]}" if len(problems) == 1 else
                           f"{len(problems)} unusable sdists:\n  " + "\n  ".join(problems), 2)
    return hashes


def _claim_successor(storage: object, site: Path, fetched: bytes | None) -> None:
    """Where the storage can decide between racing writers (a bucket's conditional PUT), claim the published
    state this release built on: one successor per state. A second release built on the same state would drop
    the first one's wheels when deployed after it, so it is refused (exit 1) however the deploys are ordered;
    its rerun merges onto the state the first one deployed. A rerun of the same release (same site) holds the
    claim already."""
    claim = getattr(storage, "claim", None)
    if claim is None:
        return
    from .index import KilnIndexError

    base = hashlib.sha256(fetched or b"").hexdigest()
    ours = hashlib.sha256((site / "kiln-index.json").read_bytes()).hexdigest().encode("ascii")
    name = f".kiln-claims/{base}"
    try:
        held = claim(name, ours)
    except KilnIndexError as exc:
        raise ReleaseError("storage", str(exc), exc.exit_code) from None
    if held is not None and held != ours:
        shutil.rmtree(site, ignore_errors=True)
        raise ReleaseError("race", f"another release already built on the same published state (its claim "
                           f"{name} in {getattr(storage, 'where', lambda: 'the storage')()} names another site): "
                           "deploying both would drop one's wheels; SITE was emptied. Rerun once that release is "
                           "deployed (if it never deployed, delete that claim first)", 1)


def _still_published(site: Path, published_url: str, fetched: bytes | None) -> None:
    """The live manifest must still be the one this release built on: another release that deployed meanwhile
    would be dropped by deploying SITE. Then SITE is emptied (nothing to deploy) and the release refused (exit 1):
    a rerun merges onto the new state and adopts this run's uploads (same bytes)."""
    from .index.fetch import FetchError, published_manifest

    try:
        now = published_manifest(published_url)
    except FetchError as exc:
        raise ReleaseError("fetch", f"re-checking the published site: {exc}", exc.exit_code) from None
    if now != fetched:
        shutil.rmtree(site, ignore_errors=True)
        raise ReleaseError("race", f"{published_url} changed during this release (another release deployed?): "
                           "deploying this site would drop what that release listed; SITE was emptied, rerun the "
                           "release to merge onto the published state", 1)


def _published_chain(published_url: str | None, signer: Signer | None) -> PublishedChain:
    """The published release chain, before anything is uploaded: a signed index takes only signed releases."""
    from .kiln_wheel import served
    from .signing import SigningError, fetch_chain

    try:
        chain = fetch_chain(published_url, served()[0])
    except SigningError as exc:
        raise ReleaseError("sign", str(exc), exc.exit_code) from None
    if chain.chain is not None and signer is None:
        raise ReleaseError("sign", f"the published index is signed (release {chain.chain.head.sequence}); an unsigned "
                           "release would break its chain: sign with --sign-key FILE or --sign-keyless", 2)
    return chain


def _sign(site: Path, snapshot: Path, signer: Signer, chain: PublishedChain, storage: object, say: Say) -> None:
    """The next release manifest, signed, into SITE (and beside the wheels in a storage, never overwriting)."""
    from .index import KilnIndexError
    from .kiln_wheel import served
    from .signing import SigningError, sign_release

    try:
        sign_release(site, served()[0], signer, chain, snapshot, storage=cast("Putter | None", storage), say=say)
    except SigningError as exc:
        raise ReleaseError("sign", str(exc), exc.exit_code) from None
    except KilnIndexError as exc:
        raise ReleaseError("sign", f"storing the signed release manifest: {exc}", exc.exit_code) from None


def run_release(dist: Path, site: Path, base_url: str, published_url: str | None, *, first_release: bool,
                say: Say = print, storage_config: Path | None = None, repository: str | None = None,
                tag: str | None = None, gh: GhCli | None = None, signer: Signer | None = None,
                allow_dirty: bool = False, sdists: Sequence[Path] = ()) -> ReleaseResult:
    """``storage_config``: data/storage.json when None (this repository: the release's assets); ``gh``: how
    gh is run (default: `gh` on PATH); ``signer``: signs the release manifest (kiln_tool.signing; None: an
    unsigned release, refused onto an index whose releases are signed); ``allow_dirty``: wheels whose build info
    says their tree had uncommitted changes are let through with a line said (`kiln release-rehearsal` only, which
    publishes nowhere; a release refuses them); ``sdists``: the project's sdists (`kiln sdist`), published beside
    the wheels, stored and signed like them."""
    from .index.storage import load_config

    if published_url is None and not first_release:
        raise ReleaseError("input", "name the published site (--published URL); only the first release may "
                           "start from an empty one (--first-release)", 2)
    if site.exists() and any(site.iterdir()):
        raise ReleaseError("input", f"{site} is not empty: the release fetches the published site into it", 2)
    if not dist.is_dir():
        raise ReleaseError("input", f"{dist}: no such directory", 2)
    from .index import KilnIndexError

    try:
        config = load_config(storage_config)
    except KilnIndexError as exc:
        raise ReleaseError("storage", str(exc), exc.exit_code) from None
    if signer is not None:
        from .signing import SigningError

        try:
            signer.check()  # before anything is read, audited or uploaded
        except SigningError as exc:
            raise ReleaseError("sign", str(exc), exc.exit_code) from None
    with tempfile.TemporaryDirectory(prefix="kiln-release-dist-") as tmp, \
            tempfile.TemporaryDirectory(prefix="kiln-release-sdist-") as sdist_tmp:
        snapshot = Path(tmp)
        hashes = snapshot_dist(dist, snapshot)
        sdist_hashes = snapshot_sdists(sdists, Path(sdist_tmp))
        if not allow_dirty:
            _refuse_dirty(sorted(snapshot.iterdir()))
        elif dirty := [w.name for w in sorted(snapshot.iterdir()) if _dirty_commit(w) is not None]:
            say(f"release: {len(dirty)} wheel(s) built from an uncommitted tree, let through for a rehearsal only: "
                f"{', '.join(dirty)}")
        return _release(snapshot, hashes, dist, site, base_url, published_url, first_release=first_release, say=say,
                        config=config, repository=repository, tag=tag, gh=gh, signer=signer,
                        sdist_hashes=sdist_hashes, sdist_snapshot=Path(sdist_tmp))


def _release(snapshot: Path, hashes: dict[str, str], dist: Path, site: Path, base_url: str,
             published_url: str | None, *, first_release: bool, say: Say, config: dict[str, Any],
             repository: str | None, tag: str | None, gh: GhCli | None, signer: Signer | None = None,
             sdist_hashes: dict[str, str] | None = None, sdist_snapshot: Path | None = None) -> ReleaseResult:
    from .index import KilnIndexError, build_index
    from .index.fetch import FetchError, fetch_site
    from .index.storage import open_storage

    wheels = sorted(snapshot.iterdir())
    try:
        storage = open_storage(config, repository=repository, tag=tag, gh=gh)
    except KilnIndexError as exc:
        raise ReleaseError("storage", str(exc), exc.exit_code) from None
    try:
        recorded = _record_torch_abis(wheels, say)
    except Exception as exc:
        raise ReleaseError("torch-abi", str(exc), 2) from None
    _audit(wheels, dist, say)
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
        from .index.ledger import check_names_free

        check_names_free(storage, hashes, site, published_url, sdists=sdist_hashes)
    except KilnIndexError as exc:
        raise ReleaseError("storage", str(exc), exc.exit_code) from None
    manifest_path = site / "kiln-index.json"
    fetched_manifest = manifest_path.read_bytes() if manifest_path.is_file() else None
    chain = _published_chain(published_url, signer)
    try:
        # SITE holds the fetched manifest and no page, and is deployed whole: every page is rendered.
        # The snapshot's wheels were audited above with the release rules: exactly those bytes are listed.
        sdist_paths = [sdist_snapshot / name for name in sorted(sdist_hashes or {})] if sdist_snapshot else []
        result = build_index(snapshot, site, base_url, log=say, storage=storage, render_all=True, audit=None,
                             audited={**hashes, **(sdist_hashes or {})}, sdists=sdist_paths)
    except KilnIndexError as exc:
        raise ReleaseError("index", str(exc), exc.exit_code) from None
    except OSError as exc:
        raise ReleaseError("index", f"cannot write the site: {exc}", 2) from None
    if signer is not None:
        _sign(site, snapshot, signer, chain, storage, say)
    _claim_successor(storage, site, fetched_manifest)
    if published_url is not None:
        _still_published(site, published_url, fetched_manifest)
    added = tuple(w.filename for w in result.added)
    added += tuple(s.filename for s in result.added_sdists)
    for name in added:
        say(f"release: added {name}")
    uploaded = tuple(w.filename for w in result.added if w.url is not None) + \
        tuple(s.filename for s in result.added_sdists if s.url is not None)
    return ReleaseResult(recorded=recorded, added=added, unchanged=tuple(result.unchanged), fetched=fetched,
                         downloaded_bytes=stats.get("bytes", 0), uploaded=uploaded)
