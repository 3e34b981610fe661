"""Build the site from a wheel directory and merge it into OUT, append-only, never half-written.

A run reads the existing index (OUT/kiln-index.json, validated as untrusted input), verifies
every published file against its sha256, then stages its work in a folder beside OUT:
1. every wheel of DIST is read once: a wheel that is the same distribution as a published one
   (normalized name, version, overlapping tags: index/identity.py) must have the same bytes
   (else exit 1); a new wheel is checked (else exit 2) and copied in;
2. every new wheel's copy is audited (a failing wheel: exit 1);
3. pages are rendered from the merged manifest.
A new site is then renamed into place in one step. An existing site is merged file by file:
new wheels first, then the pages they change (each written beside its target and renamed over
it), the manifest last; so a merge writes O(new wheels) files and a reader never sees a page
that links a missing wheel. A marker (.kiln-merge-pending) makes the next run re-render every
page if a merge is cut short. Any refusal happens before OUT is touched.

Runs on one OUT are serialized by a lock keyed on OUT's canonical path (index/locking.py); a
staging folder is locked by the run that owns it, so a stale one is removed only once its run
is gone.
"""

# The loops over every published file use os and str paths: pathlib costs several times more per
# file, and an index holds tens of thousands of files (target: 10,000 wheels in 3 s).
# ruff: noqa: PTH101, PTH102, PTH104, PTH106, PTH108, PTH112, PTH113, PTH117, PTH118, PTH120, PTH123, S103

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import stat
import struct
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from ..safezip import UnsafeArchiveError, check_archive
from . import render
from .combos import Combination, TorchCatalog, combinations_for, python_support
from .errors import AuditRefusedError, IndexConflictError, IndexInputError, IndexIntegrityError, KilnIndexError
from .identity import Identities
from .locking import Staging, output_lock, remove_stale_staging
from .manifest import (
    MANIFEST_NAME,
    MANIFEST_SCHEMA,
    PENDING_MARKER,
    Manifest,
    PublishedWheel,
    check_base_url,
    load_manifest,
    parse_manifest,
)
from .sdists import SDIST_DIR, SOURCE_PAGE, PublishedSdist, inspect_sdist, version_key
from .storage import Storage, Upload, check_listed, plan_uploads, upload_all
from .wheels import ParsedName, WheelInfo, check_wheel_name, file_sha256, inspect_wheel

Auditor = Callable[[Path], tuple[bool, str]]
"""Audits one wheel: (passed, report text)."""

_CHUNK = 1 << 20


@dataclass
class IndexResult:
    out: Path
    added: list[PublishedWheel] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    added_sdists: list[PublishedSdist] = field(default_factory=list)
    combos: list[Combination] = field(default_factory=list)
    total: int = 0


def kiln_audit(wheel: Path) -> tuple[bool, str]:
    """The real audit (`kiln audit`), imported only when a wheel needs it."""
    try:
        from kiln_tool.audit import AuditInputError, audit_paths
    except ImportError as exc:
        raise IndexInputError(
            f"cannot audit {wheel.name}: kiln's audit (kiln_tool.audit) is not importable ({exc}); "
            "refusing to list unaudited wheels"
        ) from None
    try:
        # `kiln audit WHEEL` as a maintainer runs it: the target torch and arch list from the wheel's build
        # info, the default manylinux policy for tags that claim none.
        report = audit_paths([wheel])
    except AuditInputError as exc:
        raise IndexInputError(f"{wheel.name}: the audit cannot read it: {exc}") from None
    except (ValueError, LookupError, ArithmeticError, struct.error, UnicodeError, AssertionError, TypeError) as exc:
        # A malformed ELF (or other member) that the audit's parsers did not anticipate: unusable input.
        detail = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise IndexInputError(f"{wheel.name}: the audit cannot parse it: {detail}") from None
    return bool(report.ok), str(report.render_text())


def normalize_base_url(url: str | None) -> str | None:
    """``https://host/path`` -> ``https://host/path/``, then held to the very rules the manifest is read with."""
    if url is None:
        return None
    return check_base_url(url if url.endswith("/") else url + "/")


def list_dist(dist: Path) -> tuple[list[tuple[Path, ParsedName]], list[str]]:
    """The wheels of ``dist`` (hidden files, e.g. partial copies, are skipped), and every bad name."""
    if not dist.is_dir():
        raise IndexInputError(f"{dist}: no such directory")
    wheels: list[tuple[Path, ParsedName]] = []
    problems: list[str] = []
    with os.scandir(dist) as scan:
        entries = sorted(scan, key=lambda e: e.name)
    for entry in entries:
        if entry.name.startswith(".") and not entry.name.endswith(".whl"):
            continue  # e.g. `kiln wheels`' own .NAME.partial staging files
        # Judged by the entry itself (lstat), before anything opens it: a FIFO would block a reader, a link
        # would publish whatever it points at when read. Every command refuses them alike.
        kind = _kind(entry)
        if kind is not None:
            problems.append(f"{entry.name!r}: not a wheel file ({kind}; only regular *.whl files belong in {dist})")
            continue
        try:
            wheels.append((dist / entry.name, check_wheel_name(entry.name)))
        except IndexInputError as exc:
            problems.append(str(exc))
    return wheels, problems


def _kind(entry: os.DirEntry[str]) -> str | None:
    """What a DIST entry is when it is not a regular file (not following links); None for a regular file."""
    try:
        mode = entry.stat(follow_symlinks=False).st_mode
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    if stat.S_ISREG(mode):
        return None
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path: Path | str) -> int:
    """A file descriptor of a regular file, never blocking and never following a link (a DIST entry swapped for
    a FIFO or a link after it was listed is refused, not opened); IndexInputError otherwise."""
    name = Path(path).name
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise IndexInputError(f"{name!r}: a symbolic link, not a regular file") from None
        raise IndexInputError(f"{name!r}: unreadable ({exc.strerror})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise IndexInputError(f"{name!r}: not a regular file (only regular *.whl files are published)")
    os.set_blocking(fd, True)
    return fd


def unusable_dist(dist: Path, problems: list[str]) -> IndexInputError:
    return IndexInputError(f"{len(problems)} unusable file(s) in {dist}:\n  " + "\n  ".join(problems))


def check_apart(dist: Path, out: Path) -> None:
    """DIST and OUT (both resolved, symlinks followed) may not be one folder or lie inside each other."""
    if dist == out:
        raise IndexInputError(f"the wheel directory and the output are one folder ({out})")
    if out in dist.parents:
        raise IndexInputError(f"the wheel directory {dist} must not lie inside the output {out}")
    if dist in out.parents:
        raise IndexInputError(f"the output {out} must not lie inside the wheel directory {dist} "
                              "(every later run would read the site as wheels)")


def build_index(dist: Path, out: Path, base_url: str | None = None, *, audit: Auditor | None = kiln_audit,
                catalog: TorchCatalog | None = None, log: Callable[[str], None] | None = None,
                verify_published: bool = True, storage: Storage | None = None,
                render_all: bool = False, audited: Mapping[str, str] | None = None,
                sdists: Sequence[Path] = ()) -> IndexResult:
    """Index every wheel of ``dist`` into the site at ``out`` (created or merged).

    ``audit=None`` lists wheels unaudited: for synthetic wheels (benchmarks), never for a release.
    ``verify_published=False`` checks published files by size only (see docs/security.md).
    ``storage``: where new wheels go (index/storage.py); None: the site folder. A stored wheel is uploaded
    (never over an existing name), read back by the storage's digest, and only then listed; the site then
    holds pages and the manifest, which link it by its absolute URL.
    ``render_all``: render every page, not only those the new wheels change (a release's SITE holds the fetched
    manifest and no page, and is deployed whole).
    ``audited``: wheel name -> the sha256 of the bytes a caller already audited with its own rules (a release:
    release.py); a new wheel is then listed only with exactly those bytes, and ``audit`` is not run again.
    ``sdists``: the project's source distributions to publish beside the wheels (index/sdists.py: one per
    version, unlabelled, of this project; stored where the wheels go, listed on source/index.html).
    """
    say = log or (lambda _msg: None)
    base_url = normalize_base_url(base_url)
    if catalog is None:
        try:
            catalog = TorchCatalog.from_matrix()
        except (OSError, ValueError) as exc:
            raise IndexInputError(f"data/matrix.json: {exc}") from None
    out = Path(os.path.realpath(out))
    dist = Path(os.path.realpath(dist))
    check_apart(dist, out)
    if out.exists() and not out.is_dir():
        raise IndexInputError(f"{out} exists and is not a directory")

    paths, name_problems = list_dist(dist)
    with output_lock(out):
        for removed in remove_stale_staging(out):
            say(f"removed {removed} (left by an interrupted run)")
        manifest = load_manifest(out)
        in_place = out.exists()  # an existing folder (perhaps a mount point) is merged into, never replaced
        manifest = manifest or Manifest(base_url=None, wheels={})
        pending = load_pending(out) if in_place else None
        if pending is not None:
            manifest = _roll_forward(out, manifest, pending, say)
        if not paths and not name_problems and not manifest.wheels and not sdists:
            raise IndexInputError(f"{dist} has no wheels and {out} has no index: nothing to publish")
        _check_published_files(out, manifest, verify_published)
        _check_stored(manifest, storage, say)

        created = [] if in_place else _make_parents(out.parent)
        staging = Staging.create(out, inside=in_place)
        tmp = staging.path
        try:
            wheel_dir = tmp / render.WHEEL_DIR
            _mkdir(wheel_dir)
            to_add, unchanged = _stage_new(dist, paths, out, manifest, wheel_dir, name_problems)
            sdist_dir = tmp / SDIST_DIR
            new_sdists, same_sdists = _stage_sdists(sdists, manifest, sdist_dir, out)
            unchanged += same_sdists
            if not to_add and not unchanged and not manifest.wheels:
                raise IndexInputError(f"{dist} has no wheels and {out} has no index: an sdist is published beside "
                                      "wheels, never alone")
            if audited is not None:
                pairs = [(w.filename, w.sha256) for w in to_add] + [(d.filename, d.sha256) for d in new_sdists]
                unaudited = [name for name, sha256 in pairs if audited.get(name) != sha256]
                if unaudited:
                    raise IndexInputError("refusing: not the bytes that were audited: " + ", ".join(unaudited))
            elif audit is not None and to_add:
                # The audit reads the very copies that get published, not DIST's files.
                _audit_all(audit, [(wheel_dir / w.filename, dist / w.filename) for w in to_add], say)

            stored = _store(storage, to_add, wheel_dir, say, new_sdists, sdist_dir) \
                if storage is not None and (to_add or new_sdists) else {}
            published = {
                name: entry.with_combos(combinations_for(entry.abi_mode, entry.cuda_tag, entry.torch_major_minor,
                                                         entry.torch_requirement, catalog))
                for name, entry in manifest.wheels.items()
            }
            added = []
            for wheel in to_add:
                combos = combinations_for(wheel.abi_mode, wheel.cuda_tag, wheel.torch_major_minor,
                                          wheel.torch_requirement, catalog)
                url, stored_at, metadata_beside = stored.get(wheel.filename, (None, None, True))
                published[wheel.filename] = PublishedWheel.from_wheel(wheel, combos, url, stored_at, metadata_beside)
                added.append(published[wheel.filename])
            published_sdists = dict(manifest.sdists)
            for sdist in new_sdists:
                url, stored_at, _beside = stored.get(sdist.filename, (None, None, False))
                published_sdists[sdist.filename] = PublishedSdist(
                    filename=sdist.filename, project=sdist.project, version=sdist.version, sha256=sdist.sha256,
                    size=sdist.size, url=url, stored_at=stored_at)
            new_manifest = Manifest(base_url=base_url or manifest.base_url, wheels=published, sdists=published_sdists)
            _accepted_by_next_run(new_manifest, [w.filename for w in to_add], [s.filename for s in new_sdists])
            pythons = set(catalog.pythons) | {python_support(w.python_tag)[0] for w in published.values()}
            if in_place and not render_all and pending is None and \
                    not os.path.lexists(os.path.join(out, PENDING_MARKER)):
                changed = [w for name, w in published.items() if manifest.wheels.get(name) is not w]
                only = _pages_of(changed, manifest) | ({SOURCE_PAGE} if new_sdists else set())
                pages = _render_site(new_manifest, sorted(pythons), catalog, only)
            else:
                pages = _render_site(new_manifest, sorted(pythons), catalog, None)
            in_site = [w.filename for w in to_add if w.filename not in stored]
            sdists_in_site = [s.filename for s in new_sdists if s.filename not in stored]
            if stored:  # the staged copies of stored wheels are not part of the site
                for name in stored:
                    if name.endswith(".whl"):
                        os.unlink(os.path.join(wheel_dir, name))
                        os.unlink(os.path.join(wheel_dir, f"{name}.metadata"))
                    else:
                        os.unlink(os.path.join(sdist_dir, name))
                if not in_site and not in_place:
                    os.rmdir(wheel_dir)
            if os.path.isdir(sdist_dir) and not sdists_in_site:
                os.rmdir(sdist_dir)
            if in_place:
                _merge_in_place(tmp, out, in_site, pages, sdists_in_site)
            else:
                for rel, text in pages.items():
                    _write_inside(tmp, rel, text)
                tmp.chmod(0o755)
                tmp.rename(out)  # the new site appears in one step
                staging.renamed()
        except BaseException:
            staging.remove()
            for directory in reversed(created):
                with contextlib.suppress(OSError):
                    directory.rmdir()
            raise
        staging.remove()

    result = IndexResult(out=out, added=added, unchanged=unchanged, total=len(published),
                         added_sdists=[new_manifest.sdists[s.filename] for s in new_sdists])
    result.combos = sorted({c for w in published.values() for c in w.combos}, key=lambda c: c.sort_key)
    return result


def _accepted_by_next_run(manifest: Manifest, new: list[str], new_sdists: Sequence[str] = ()) -> None:
    """What this run is about to write, read back by the reader every later run uses (schema, then meaning:
    manifest.parse_manifest's checks, on the top level and on each new entry; the published entries were
    read by that very reader at the start of this run): an input is accepted only if the site it produces
    is accepted by the next run."""
    doc = {"schema": MANIFEST_SCHEMA, "generator": "kiln index", "base_url": manifest.base_url,
           "wheels": [manifest.wheels[name].to_json() for name in new]}
    if manifest.sdists:  # every sdist: the reader checks them against each other (one per version)
        doc["sdists"] = [manifest.sdists[name].to_json() for name in sorted(manifest.sdists)]
    try:
        again = parse_manifest(json.dumps(doc).encode("utf-8"), MANIFEST_NAME)
    except IndexInputError as exc:
        raise IndexInputError(f"refusing: the next run would refuse the site this run would write: {exc}") from None
    if any(again.wheels[name] != manifest.wheels[name] for name in new) or again.base_url != manifest.base_url or \
            any(again.sdists.get(name) != manifest.sdists[name] for name in new_sdists):
        raise IndexInputError("refusing: the manifest this run would write does not read back as written")


def load_pending(out: Path) -> Manifest | None:
    """The manifest a merge that was cut short meant to write (OUT/.kiln-merge-pending), if any."""
    path = os.path.join(out, PENDING_MARKER)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        raise IndexInputError(f"{path}: not a regular file; refusing to merge into a damaged index")
    with open(path, "rb") as fh:
        raw = fh.read()
    try:
        return parse_manifest(raw, path)
    except IndexInputError:
        return Manifest(base_url=None, wheels={})  # a marker of an older kiln: re-render every page, nothing more


def _roll_forward(out: Path, manifest: Manifest, pending: Manifest, say: Callable[[str], None]) -> Manifest:
    """Finish a merge that was cut short: every wheel it moved into place is published (a page may list it),
    so it joins the manifest and keeps its bytes forever; a wheel it had not moved yet was never listed."""
    wheels = dict(manifest.wheels)
    wheel_dir = os.path.join(out, render.WHEEL_DIR)
    finished = []
    for name, entry in pending.wheels.items():
        if name in wheels:
            continue
        path = os.path.join(wheel_dir, name)
        # A stored wheel is in the journal only once uploaded and read back; a site wheel once moved in.
        if entry.url is not None or (os.path.lexists(path) and os.path.lexists(f"{path}.metadata")):
            wheels[name] = entry
            finished.append(name)
    sdists = dict(manifest.sdists)
    finished_sdists = []
    for name, sdist in pending.sdists.items():
        if name not in sdists and (sdist.url is not None or os.path.lexists(os.path.join(out, SDIST_DIR, name))):
            sdists[name] = sdist
            finished_sdists.append(name)
    if finished or finished_sdists:
        say(f"finishing a merge that was cut short: {', '.join(sorted(finished + finished_sdists))}")
    merged = Manifest(base_url=manifest.base_url or pending.base_url, wheels=wheels, sdists=sdists)
    _accepted_by_next_run(merged, finished, finished_sdists)
    return merged


def _pages_of(changed: list[PublishedWheel], manifest: Manifest) -> set[str]:
    """The pages a merge must re-render: those listing a new or re-combined wheel (_render_site renders the
    site-wide ones, index.html, the manifest and .nojekyll, on every run)."""
    pages: set[str] = set()
    known_projects = {w.project for w in manifest.wheels.values()}
    for wheel in changed:
        for combo in wheel.combos:
            pages.update((combo.page, combo.flat_page))
        pages.add(f"{render.SIMPLE_DIR}/{wheel.project}/index.html")
        if wheel.project not in known_projects:
            pages.add(f"{render.SIMPLE_DIR}/index.html")
    return pages


def inside(root: Path, rel: str) -> str:
    """``root/rel`` as a string, once proven to resolve (symlinks followed) to a path inside ``root``."""
    target = os.path.join(root, rel)
    resolved = os.path.realpath(target)
    if os.path.isabs(rel) or not resolved.startswith(os.fspath(root) + os.sep):
        raise IndexInputError(f"refusing to write {rel!r}: it resolves to {resolved}, outside {root}")
    return target


def _mkdir(path: Path | str) -> list[str]:
    """mkdir -p with every folder it creates at mode 0755, whatever the umask; returns what it created."""
    path = os.fspath(path)
    if os.path.isdir(path):
        return []
    created = _mkdir(os.path.dirname(path))
    os.mkdir(path)
    os.chmod(path, 0o755)  # a site is public: every folder readable and searchable by the web server
    return [*created, path]


def _write_file(path: str, data: bytes) -> None:
    """A new file at mode 0644 (not the caller's umask: a web server must read every page)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        os.fchmod(fd, 0o644)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def _write_inside(root: Path, rel: str, text: str) -> None:
    target = inside(root, rel)
    _mkdir(os.path.dirname(target))
    _write_file(target, text.encode("utf-8"))


class MergeCutShortError(KilnIndexError):
    """An I/O error after the merge began changing the site: the message says exactly what is in place."""

    exit_code = 2


def _merge_in_place(tmp: Path, out: Path, new_wheels: list[str], pages: dict[str, str],
                    new_sdists: Sequence[str] = ()) -> None:
    """Commit a merge: every byte is staged (inside OUT: one file system) before the site changes; then the
    journal (.kiln-merge-pending: the manifest being written), the new wheels, each changed page, the
    manifest last, and the journal goes. From the first rename on, renames are all that is left, and an
    error says how far the merge got; the next run finishes it (index/publish.py _roll_forward)."""
    changed = {}
    for rel, text in pages.items():
        target = inside(out, rel)
        if os.path.lexists(target) and not os.path.isfile(target):
            raise IndexInputError(f"{target} is not a file; refusing to merge into a damaged index")
        try:
            with open(target, "rb") as fh:
                if fh.read() == text.encode("utf-8"):
                    continue
        except OSError:
            pass
        changed[rel] = (target, text)
    moves = []
    for name in new_wheels:
        for rel in (f"{render.WHEEL_DIR}/{name}.metadata", f"{render.WHEEL_DIR}/{name}"):
            moves.append((os.path.join(tmp, rel), inside(out, rel)))
    for name in new_sdists:
        rel = f"{SDIST_DIR}/{name}"
        moves.append((os.path.join(tmp, rel), inside(out, rel)))
    marker = inside(out, PENDING_MARKER)
    if not moves and not changed:
        if os.path.lexists(marker):
            os.unlink(marker)
        return
    # Stage everything that takes space (ENOSPC can only strike here, before the site changes).
    last = changed.pop(MANIFEST_NAME, None)
    ordered = [*sorted(changed.items()), *([(MANIFEST_NAME, last)] if last else [])]
    staged_pages = []
    page_dir = os.path.join(tmp, ".pages")
    _mkdir(page_dir)
    for number, (rel, (target, text)) in enumerate(ordered):
        staged = os.path.join(page_dir, str(number))
        _write_file(staged, text.encode("utf-8"))
        staged_pages.append((rel, staged, target))
    journal = os.path.join(tmp, ".journal")
    _write_file(journal, pages[MANIFEST_NAME].encode("utf-8"))  # the manifest this merge ends with
    made_dirs: list[str] = []
    try:
        for directory in sorted({os.path.dirname(t) for _s, t in moves}
                                | {os.path.dirname(t) for _r, _s, t in staged_pages}):
            made_dirs += _mkdir(directory)
            # Every folder a rename lands in must take a new name now (a read-only folder, another file
            # system mounted there): found here, the site is as it was; found mid-merge, readers would see a
            # page that lists a wheel the manifest does not.
            probe = os.path.join(directory, f".kiln-probe-{os.getpid()}")
            os.link(journal, probe)
            os.unlink(probe)
        os.rename(journal, marker)
    except OSError:
        for directory in reversed(made_dirs):  # the site as it was: nothing written
            with contextlib.suppress(OSError):
                os.rmdir(directory)
        raise
    done: list[str] = []
    listed: list[str] = []
    try:
        for staged, target in moves:
            os.rename(staged, target)
            done.append(os.path.relpath(target, out))
        for rel, staged, target in staged_pages:
            os.rename(staged, target)
            done.append(rel)
            if rel != MANIFEST_NAME:
                listed.append(rel)
        os.unlink(marker)
    except OSError as exc:
        wheels_in = sum(1 for d in done if not d.endswith(".metadata") and d.startswith(f"{render.WHEEL_DIR}/"))
        if listed:
            where = (f"{len(listed)} page(s) already list them ({', '.join(listed[:5])}"
                     f"{', ...' if len(listed) > 5 else ''}): they are published, and their names keep these bytes")
        else:
            where = "no page lists them yet"
        raise MergeCutShortError(
            f"{out}: the merge was cut short ({exc.strerror or exc}: {exc.filename or ''}) after {len(done)} of "
            f"{len(moves) + len(staged_pages)} rename(s): {wheels_in} of {len(new_wheels)} new wheel(s) are in "
            f"place, {where}. Every page still links only files that are in place; "
            f"{PENDING_MARKER} records the merge and the next run finishes it"
        ) from None


_SMALL_WHEEL = 1 << 24


class _Writer:
    """Writes files on a worker thread, in batches, while the caller reads and checks the next wheels.

    Creating a file costs the kernel far more than writing its few KiB (up to 0.5 ms of system time
    per file on the ext4 disks seen here), so it overlaps with the checking. Identical METADATA (the
    wheels of one version for several Pythons and platforms) is written once and hard-linked.
    """

    BATCH = 128

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kiln-index-writer")
        self._pending: list[Future[None]] = []
        self._batch: list[tuple[str, bytes | str]] = []
        self._first_copy: dict[str, str] = {}

    def write(self, path: str, data: bytes) -> None:
        self._add(path, data)

    def write_shared(self, path: str, data: bytes, digest: str) -> None:
        first = self._first_copy.setdefault(digest, path)
        self._add(path, data if first == path else first)

    def _add(self, path: str, what: bytes | str) -> None:
        self._batch.append((path, what))
        if len(self._batch) >= self.BATCH:
            self._pending.append(self._pool.submit(_write_batch, self._batch))
            self._batch = []

    def finish(self) -> None:
        """Wait for every write; the first failure is raised."""
        if self._batch:
            self._pending.append(self._pool.submit(_write_batch, self._batch))
            self._batch = []
        self._pool.shutdown(wait=True)
        for future in self._pending:
            future.result()


def _write_batch(batch: list[tuple[str, bytes | str]]) -> None:
    """Each item: (path, bytes to write) or (path, an earlier path to hard-link)."""
    for path, what in batch:
        if isinstance(what, str):
            os.link(what, path)
        else:
            _write_new(path, what)


def _write_new(path: str, data: bytes) -> None:
    _write_file(path, data)


def _stage_new(dist: Path, paths: list[tuple[Path, ParsedName]], out: Path, manifest: Manifest,
               wheel_dir: Path, name_problems: list[str]) -> tuple[list[WheelInfo], list[str]]:
    """Read each wheel of DIST once: compare it with what is published, check it, copy it into the new site.

    Returns the wheels to add and the names already published with the same bytes.
    Raises IndexInputError (every bad wheel listed) before IndexConflictError (every clash listed).
    """
    to_add: list[WheelInfo] = []
    unchanged: list[str] = []
    problems: list[str] = list(name_problems)
    clashes: list[str] = []
    published_dir = os.path.join(out, render.WHEEL_DIR)
    published = Identities()
    for known in manifest.wheels.values():
        published.add(known.filename, known.sha256)
    incoming = Identities()
    staging = os.fspath(wheel_dir)
    writer = _Writer()
    try:
        for path, parsed in paths:
            name = path.name
            staged = os.path.join(staging, name)
            try:
                fh = os.fdopen(open_regular(path), "rb")
            except IndexInputError as exc:
                problems.append(str(exc))
                continue
            with fh:
                small = os.fstat(fh.fileno()).st_size <= _SMALL_WHEEL
                if small:
                    data = fh.read()
                    sha256, size = hashlib.sha256(data).hexdigest(), len(data)
                    source: bytes | Path = data
                else:
                    try:
                        sha256, size = copy_checked(fh, name, Path(staged))
                    except IndexInputError as exc:
                        problems.append(str(exc))
                        continue
                    source = Path(staged)
            entry = manifest.wheels.get(name)
            if entry is not None:
                # Published before, so checked and audited before: only its bytes matter now.
                if entry.sha256 == sha256:
                    unchanged.append(name)
                else:
                    clashes.append(f"{name}: published with sha256 {entry.sha256}, this one is {sha256}")
                if isinstance(source, Path):
                    source.unlink()
                continue
            twin = published.find(name) or incoming.find(name)
            if twin is not None:
                # One distribution, two names (0.1.0 vs 0.1.0.0, OpKiln vs opkiln, another build tag):
                # never a second copy. The same bytes are already served; other bytes are refused.
                twin_name, twin_sha256 = twin
                if twin_sha256 == sha256:
                    unchanged.append(f"{name} (as {twin_name})")
                else:
                    clashes.append(f"{name}: the same distribution as {twin_name} (normalized name, version and "
                                   f"tags), with other bytes (sha256 {sha256}, {twin_name} has {twin_sha256})")
                if isinstance(source, Path):
                    source.unlink()
                continue
            incoming.add(name, sha256)
            if os.path.lexists(os.path.join(published_dir, name)):
                stray = Path(published_dir, name)
                stray_sha256, _size = file_sha256(stray)
                if stray_sha256 != sha256:
                    clashes.append(f"{name}: {stray} already holds other bytes (sha256 {stray_sha256})")
            try:
                wheel = inspect_wheel(name, parsed, source, sha256, size)
            except IndexInputError as exc:
                problems.append(str(exc))
                continue
            if problems or clashes:
                continue  # refusing anyway: keep checking, stop writing (the staging area is dropped)
            if isinstance(source, bytes):
                writer.write(staged, source)
            writer.write_shared(f"{staged}.metadata", wheel.metadata, wheel.metadata_sha256)
            to_add.append(wheel)
    finally:
        writer.finish()
    if problems:
        raise unusable_dist(dist, problems)
    if clashes:
        raise IndexConflictError(
            "refusing to publish: a published wheel is never replaced (bump the version instead):\n  "
            + "\n  ".join(clashes)
        )
    return to_add, unchanged


def _stage_sdists(sdists: Sequence[Path], manifest: Manifest, sdist_dir: Path,
                  out: Path) -> tuple[list[PublishedSdist], list[str]]:
    """Copy each given sdist once into the staging folder (hashed while copied), check the copy, and hold it
    to the published ones: one sdist per version, never other bytes under a published name. Returns the new
    sdists and the names published before with the same bytes. IndexInputError (every bad file) before
    IndexConflictError (every clash)."""
    from ..kiln_wheel import served

    if not sdists:
        return [], []
    project = served()[0]
    problems: list[str] = []
    clashes: list[str] = []
    new: list[PublishedSdist] = []
    unchanged: list[str] = []
    versions = {version_key(s.version): s for s in manifest.sdists.values()}
    given: dict[str, Path] = {}
    _mkdir(sdist_dir)
    for path in sdists:
        name = path.name
        given.setdefault(name, path)
        try:
            fd = open_regular(path)
        except IndexInputError as exc:
            problems.append(f"--sdist {path}: {exc}")
            continue
        staged = sdist_dir / name
        if os.path.lexists(staged):  # another path with this file name
            os.close(fd)
            problems.append(f"{name}: given twice (as {given[name]} and {path})")
            continue
        with os.fdopen(fd, "rb") as fh:
            sha256, size = copy_hashed(fh, staged)
        try:
            sdist = inspect_sdist(name, staged, sha256, size, project)
        except IndexInputError as exc:
            problems.append(str(exc))
            continue
        published = versions.get(version_key(sdist.version))
        if published is not None:
            if published.filename == name and published.sha256 == sha256:
                unchanged.append(name)
                staged.unlink()
            elif published.filename == name:
                clashes.append(f"{name}: published with sha256 {published.sha256}, this one is {sha256}")
            else:
                clashes.append(f"{name}: version {sdist.version} already has its sdist, {published.filename}")
            continue
        twin = next((s for s in new if version_key(s.version) == version_key(sdist.version)), None)
        if twin is not None:
            problems.append(f"{name} and {twin.filename}: two sdists of version {sdist.version}; one per version")
            continue
        stray = os.path.join(out, SDIST_DIR, name)
        if os.path.lexists(stray) and file_sha256(Path(stray))[0] != sha256:
            clashes.append(f"{name}: {stray} already holds other bytes")
            continue
        new.append(sdist)
    if problems:
        raise IndexInputError(f"unusable sdist: {problems[0]}" if len(problems) == 1 else
                              f"{len(problems)} unusable sdists:\n  " + "\n  ".join(problems))
    if clashes:
        raise IndexConflictError("refusing to publish: a published sdist is never replaced, and a version has one "
                                 "sdist (bump the version instead):\n  " + "\n  ".join(clashes))
    return new, unchanged


def _make_parents(directory: Path) -> list[Path]:
    """mkdir -p that returns what it created, so a refusal can remove it again."""
    missing = []
    while not directory.exists():
        missing.append(directory)
        directory = directory.parent
    created = []
    for path in reversed(missing):
        path.mkdir()
        created.append(path)
    return created


def _audit_all(audit: Auditor, wheels: list[tuple[Path, Path]], say: Callable[[str], None]) -> None:
    """Audit each staged copy; the report names the wheel of DIST it was copied from."""
    failures = []
    for staged, source in wheels:
        ok, text = audit(staged)
        if ok:
            say(f"audited {source.name}: ok")
        else:
            text = text.replace(str(staged), str(source)).rstrip()
            failures.append(f"{source.name} failed the audit; not listed:\n{text}")
    if failures:
        raise AuditRefusedError("\n\n".join(failures))


def _check_published_files(out: Path, manifest: Manifest, verify: bool = True) -> None:
    """Every published wheel and its METADATA must be there; with ``verify``, with the bytes the manifest
    records (sha256, streamed). A missing file is a damaged index (exit 2); other bytes are exit 1."""
    wheel_dir = os.path.join(out, render.WHEEL_DIR)
    missing = []
    altered = []

    def check(entry: PublishedWheel) -> None:
        path = os.path.join(wheel_dir, entry.filename)
        for target, size in ((path, entry.size), (f"{path}.metadata", None)):
            try:
                st = os.lstat(target)
            except OSError:
                missing.append(f"{target} (missing)")
                continue
            if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode):
                altered.append(f"{target} (not a regular file: a link or a folder, not the published file)")
            elif size is not None and st.st_size != size:
                altered.append(f"{target} ({st.st_size} bytes, published with {size})")
            elif verify:
                digest = file_sha256(Path(target))[0]
                expected = entry.sha256 if size is not None else entry.metadata_sha256
                if digest != expected:
                    altered.append(f"{target} (sha256 {digest}, published with {expected})")

    for sdist in manifest.sdists.values():
        if sdist.url is None:
            target = os.path.join(out, SDIST_DIR, sdist.filename)
            try:
                st = os.lstat(target)
            except OSError:
                missing.append(f"{target} (missing)")
                continue
            if not stat.S_ISREG(st.st_mode):
                altered.append(f"{target} (not a regular file: a link or a folder, not the published file)")
            elif st.st_size != sdist.size:
                altered.append(f"{target} ({st.st_size} bytes, published with {sdist.size})")
            elif verify and file_sha256(Path(target))[0] != sdist.sha256:
                altered.append(f"{target} (sha256 differs from the published {sdist.sha256})")
    entries = [w for w in manifest.wheels.values() if w.url is None]  # stored ones: _check_stored
    if verify and len(entries) > 64:
        with ThreadPoolExecutor(max_workers=4, thread_name_prefix="kiln-index-verify") as pool:
            list(pool.map(check, entries, chunksize=64))
    else:
        for entry in entries:
            check(entry)
    if altered:
        raise IndexIntegrityError(
            f"{out}: published files differ from what {MANIFEST_NAME} records; refusing to merge "
            "(a published wheel is never replaced: restore it from a backup or the release assets):\n  "
            + "\n  ".join(sorted(altered))
        )
    if missing:
        raise IndexInputError(
            f"{out}: published files do not match {MANIFEST_NAME}; refusing to merge into a damaged index:\n  "
            + "\n  ".join(sorted(missing))
        )


def _check_stored(manifest: Manifest, storage: Storage | None, say: Callable[[str], None]) -> None:
    """Every listed wheel that lives in storage is still there, by the storage's own listing (sizes; sha256
    where the listing reports it: release assets). An S3 bucket's sha256s are checked by the separate full
    verification (tools/verify_published.py), not by every release."""
    entries = [(w.filename, w.stored_at or "", w.size, w.sha256, w.metadata_beside, w.metadata_sha256)
               for w in manifest.wheels.values() if w.url is not None]
    entries += [(s.filename, s.stored_at or "", s.size, s.sha256, False, "")
                for s in manifest.sdists.values() if s.url is not None]
    if not entries:
        return
    if storage is None:
        say(f"{len(entries)} listed wheel(s) live in storage; not checked by a run without --storage")
        return
    checked, elsewhere, places = check_listed(storage, entries)
    said = [f"checked {checked} stored wheel(s) against the storage's own listing of {', '.join(places)}"] \
        if checked else []
    if elsewhere:
        said.append(f"{elsewhere} stored elsewhere than {storage.where()}, not checked here")
    say("; ".join(said))


def _store(storage: Storage, wheels: list[WheelInfo], wheel_dir: Path, say: Callable[[str], None],
           sdists: Sequence[PublishedSdist] = (), sdist_dir: Path | None = None) -> dict[str, tuple[str, str, bool]]:
    """Upload the new wheels (and their METADATA where the storage serves it) before anything lists them;
    an earlier run's uploads with the same bytes are adopted, other bytes refused (before any upload)."""
    items = []
    for wheel in wheels:
        if storage.serves_metadata:
            items.append(Upload(f"{wheel.filename}.metadata", wheel_dir / f"{wheel.filename}.metadata",
                                wheel.metadata_sha256, len(wheel.metadata)))
        items.append(Upload(wheel.filename, wheel_dir / wheel.filename, wheel.sha256, wheel.size))
    for sdist in sdists:
        items.append(Upload(sdist.filename, (sdist_dir or wheel_dir) / sdist.filename, sdist.sha256, sdist.size))
    new, adopted = plan_uploads(storage, items)
    for name in adopted:
        say(f"adopted {name}: {storage.where()} already holds it with the same bytes (an earlier run's upload)")
    upload_all(storage, new, say)
    done = {w.filename: (storage.url(w.filename), storage.stored_at(w.filename), storage.serves_metadata)
            for w in wheels}
    done.update({s.filename: (storage.url(s.filename), storage.stored_at(s.filename), False) for s in sdists})
    return done


def _render_site(manifest: Manifest, pythons: list[str], catalog: TorchCatalog,
                 only: set[str] | None) -> dict[str, str]:
    """Every page of the site (or those in ``only``), by path relative to the root."""
    by_combo: dict[Combination, list[PublishedWheel]] = {}
    by_project: dict[str, list[PublishedWheel]] = {}
    for wheel in manifest.wheels.values():
        by_project.setdefault(wheel.project, []).append(wheel)
        for combo in wheel.combos:
            by_combo.setdefault(combo, []).append(wheel)
    pages: dict[str, str] = {}

    def wanted(rel: str) -> bool:
        return only is None or rel in only

    for combo, wheels in by_combo.items():
        if wanted(combo.page):
            pages[combo.page] = render.find_links_page(combo, wheels)
        if wanted(combo.flat_page):
            pages[combo.flat_page] = render.flat_page(combo, wheels)
    if wanted(f"{render.SIMPLE_DIR}/index.html"):
        pages[f"{render.SIMPLE_DIR}/index.html"] = render.simple_root(by_project)
    for project, wheels in by_project.items():
        if wanted(f"{render.SIMPLE_DIR}/{project}/index.html"):
            pages[f"{render.SIMPLE_DIR}/{project}/index.html"] = render.simple_project(project, wheels)
    # A site is one project's (kiln_wheel.check_name refuses another) and never empty (build_index refuses that).
    pages["index.html"] = render.landing_page(
        render.Site(project=min(by_project), base_url=manifest.base_url, combos=by_combo, pythons=pythons,
                    torch_pythons=dict(catalog.torch_pythons), torch_index=catalog.torch_index,
                    source=bool(manifest.sdists))
    )
    if manifest.sdists and wanted(SOURCE_PAGE):
        pages[SOURCE_PAGE] = render.source_page(min(by_project), list(manifest.sdists.values()))
    pages[MANIFEST_NAME] = manifest.to_json()
    pages[".nojekyll"] = ""  # GitHub Pages: serve every file as it is
    return pages


def copy_checked(fin: BinaryIO, name: str, dst: Path) -> tuple[str, int]:
    """Every bound of the archive checked before a byte is copied (a huge, sparse or non-zip file never reaches
    staging), then copy_hashed; IndexInputError naming ``name`` when a bound fails."""
    try:
        check_archive(fin)
    except UnsafeArchiveError as exc:
        raise IndexInputError(f"{name}: corrupt wheel (or unsafe): {exc}; not copied") from None
    fin.seek(0)
    return copy_hashed(fin, dst)


def copy_hashed(fin: BinaryIO, dst: Path) -> tuple[str, int]:
    """Copy a large wheel, hashing what is written; the copy is what gets checked, audited and published."""
    digest = hashlib.sha256()
    size = 0
    with dst.open("xb") as fout:
        os.fchmod(fout.fileno(), 0o644)
        while chunk := fin.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
            fout.write(chunk)
    return digest.hexdigest(), size


__all__ = ["Auditor", "IndexResult", "MergeCutShortError", "build_index", "kiln_audit", "list_dist",
           "normalize_base_url"]
