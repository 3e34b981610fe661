"""Build the site from a wheel directory and merge it into OUT, atomically and append-only.

Order of work, so that a refusal leaves nothing written:
1. read and check every wheel of DIST (exit 2 on the first kind of bad input, all listed);
2. read the existing index (its manifest) and compare names and bytes (exit 1 on a clash);
3. audit every wheel not yet published (exit 1 on a failing wheel);
4. only then build the whole new site in a temporary directory beside OUT
   (published files are hard-linked, never rewritten) and swap it into place
   with one rename (RENAME_EXCHANGE where the kernel has it).
A lock on OUT's parent (its nearest existing ancestor) keeps two runs from interleaving.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from . import render
from .combos import Combination, TorchCatalog, combinations_for, python_support
from .errors import AuditRefusedError, IndexConflictError, IndexInputError
from .manifest import MANIFEST_NAME, Manifest, PublishedWheel, load_manifest
from .wheels import WheelInfo, file_sha256, read_wheel

Auditor = Callable[[Path], tuple[bool, str]]
"""Audits one wheel: (passed, report text)."""

AUDIT_POLICY = "manylinux_2_28"
_CHUNK = 1 << 20


@dataclass
class IndexResult:
    out: Path
    added: list[PublishedWheel] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    combos: list[Combination] = field(default_factory=list)
    total: int = 0


def kiln_audit(wheel: Path) -> tuple[bool, str]:
    """The real audit (`kiln audit`), imported only when a wheel needs it."""
    try:
        from kiln_tool.audit import AuditInputError, AuditOptions, audit_paths
    except ImportError as exc:
        raise IndexInputError(
            f"cannot audit {wheel.name}: kiln's audit (kiln_tool.audit) is not importable ({exc}); "
            "refusing to list unaudited wheels"
        ) from None
    try:
        report = audit_paths([wheel], AuditOptions(torch_lib=None, cuda_archs=None, policy=AUDIT_POLICY))
    except AuditInputError as exc:
        raise IndexInputError(f"{wheel.name}: the audit cannot read it: {exc}") from None
    return bool(report.ok), str(report.render_text())


def normalize_base_url(url: str | None) -> str | None:
    """``https://host/path`` -> ``https://host/path/``; anything that is not a plain http(s) URL is refused."""
    if url is None:
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise IndexInputError(f"--base-url {url!r}: not an http(s) URL")
    if parts.query or parts.fragment or any(c in url for c in " \t\r\n\"'<>`\\"):
        raise IndexInputError(f"--base-url {url!r}: must be a plain URL without query, fragment, quotes or spaces")
    return url if url.endswith("/") else url + "/"


def scan_dist(dist: Path) -> list[WheelInfo]:
    """Every wheel of ``dist`` (hidden entries, e.g. partial downloads, are skipped); all problems at once."""
    if not dist.is_dir():
        raise IndexInputError(f"{dist}: no such directory")
    wheels: list[WheelInfo] = []
    problems: list[str] = []
    for entry in sorted(dist.iterdir(), key=lambda p: p.name):
        if entry.name.startswith("."):
            continue
        if not entry.is_file():
            problems.append(f"{entry.name!r}: not a wheel file (only *.whl files belong in {dist})")
            continue
        try:
            wheels.append(read_wheel(entry))
        except IndexInputError as exc:
            problems.append(str(exc))
    if problems:
        raise IndexInputError(f"{len(problems)} unusable file(s) in {dist}:\n  " + "\n  ".join(problems))
    return wheels


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on the nearest existing directory above ``path`` (never ``path``: it gets swapped)."""
    anchor = path.parent
    while not anchor.exists():
        anchor = anchor.parent
    fd = os.open(anchor, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def build_index(dist: Path, out: Path, base_url: str | None = None, *, audit: Auditor | None = kiln_audit,
                catalog: TorchCatalog | None = None, log: Callable[[str], None] | None = None) -> IndexResult:
    """Index every wheel of ``dist`` into the site at ``out`` (created or merged).

    ``audit=None`` lists wheels unaudited: for synthetic wheels (benchmarks), never for a release.
    """
    say = log or (lambda _msg: None)
    base_url = normalize_base_url(base_url)
    if catalog is None:
        try:
            catalog = TorchCatalog.from_matrix()
        except (OSError, ValueError) as exc:
            raise IndexInputError(f"data/matrix.json: {exc}") from None
    out = out.resolve() if out.is_symlink() else out.absolute()
    if out.exists() and not out.is_dir():
        raise IndexInputError(f"{out} exists and is not a directory")
    dist = dist.absolute()
    if dist == out or out in dist.parents:
        raise IndexInputError(f"the wheel directory {dist} must not lie inside the output {out}")

    new_wheels = scan_dist(dist)
    with _locked(out):
        manifest = load_manifest(out) or Manifest(base_url=None, wheels={})
        if not new_wheels and not manifest.wheels:
            raise IndexInputError(f"{dist} has no wheels and {out} has no index: nothing to publish")
        _check_published_files(out, manifest)
        to_add, unchanged = _split_new(out, manifest, new_wheels)

        if to_add and audit is not None:
            failures = []
            for wheel in to_add:
                ok, text = audit(dist / wheel.filename)
                if not ok:
                    failures.append(f"{wheel.filename} failed the audit; not listed:\n{text.rstrip()}")
                else:
                    say(f"audited {wheel.filename}: ok")
            if failures:
                raise AuditRefusedError("\n\n".join(failures))

        published = {
            name: entry.with_combos(combinations_for(entry.abi_mode, entry.cuda_tag, entry.torch_major_minor,
                                                     entry.torch_requirement, catalog))
            for name, entry in manifest.wheels.items()
        }
        added = []
        for wheel in to_add:
            combos = combinations_for(wheel.abi_mode, wheel.cuda_tag, wheel.torch_major_minor,
                                      wheel.torch_requirement, catalog)
            published[wheel.filename] = PublishedWheel.from_wheel(wheel, combos)
            added.append(published[wheel.filename])
        new_manifest = Manifest(base_url=base_url or manifest.base_url, wheels=published)
        pythons = set(catalog.pythons) | {python_support(w.python_tag)[0] for w in published.values()}

        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
        try:
            pages = _render_site(new_manifest, sorted(pythons))
            _carry_over(out, tmp, skip=set(pages) | {f"{render.WHEEL_DIR}/{w.filename}" for w in to_add}
                        | {f"{render.WHEEL_DIR}/{w.filename}.metadata" for w in to_add})
            wheel_dir = tmp / render.WHEEL_DIR
            wheel_dir.mkdir(exist_ok=True)
            for wheel in to_add:
                _copy_verified(dist / wheel.filename, wheel_dir / wheel.filename, wheel.sha256)
                (wheel_dir / f"{wheel.filename}.metadata").write_bytes(wheel.metadata)
            for rel, text in pages.items():
                target = tmp / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text, encoding="utf-8")
            tmp.chmod(0o755)
            _swap_into_place(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    result = IndexResult(out=out, added=added, unchanged=[w.filename for w in unchanged], total=len(published))
    result.combos = sorted({c for w in published.values() for c in w.combos}, key=lambda c: c.sort_key)
    return result


def _check_published_files(out: Path, manifest: Manifest) -> None:
    missing = []
    for entry in manifest.wheels.values():
        path = out / render.WHEEL_DIR / entry.filename
        meta = out / render.WHEEL_DIR / f"{entry.filename}.metadata"
        if not path.is_file() or path.stat().st_size != entry.size:
            missing.append(f"{path} (missing or not {entry.size} bytes)")
        if not meta.is_file():
            missing.append(f"{meta} (missing)")
    if missing:
        raise IndexInputError(
            f"{out}: published files do not match {MANIFEST_NAME}; refusing to merge into a damaged index:\n  "
            + "\n  ".join(missing)
        )


def _split_new(out: Path, manifest: Manifest, wheels: list[WheelInfo]) -> tuple[list[WheelInfo], list[WheelInfo]]:
    to_add: list[WheelInfo] = []
    unchanged: list[WheelInfo] = []
    clashes: list[str] = []
    for wheel in wheels:
        entry = manifest.wheels.get(wheel.filename)
        if entry is not None:
            if entry.sha256 == wheel.sha256:
                unchanged.append(wheel)
            else:
                clashes.append(f"{wheel.filename}: published with sha256 {entry.sha256}, this one is {wheel.sha256}")
            continue
        stray = out / render.WHEEL_DIR / wheel.filename
        if stray.exists():
            sha256, _size = file_sha256(stray)
            if sha256 != wheel.sha256:
                clashes.append(f"{wheel.filename}: {stray} already holds other bytes (sha256 {sha256})")
                continue
        to_add.append(wheel)
    if clashes:
        raise IndexConflictError(
            "refusing to publish: a published wheel is never replaced (bump the version instead):\n  "
            + "\n  ".join(clashes)
        )
    return to_add, unchanged


def _render_site(manifest: Manifest, pythons: list[str]) -> dict[str, str]:
    """Every page of the site, by path relative to the root."""
    by_combo: dict[Combination, list[PublishedWheel]] = {}
    by_project: dict[str, list[PublishedWheel]] = {}
    for wheel in manifest.wheels.values():
        by_project.setdefault(wheel.project, []).append(wheel)
        for combo in wheel.combos:
            by_combo.setdefault(combo, []).append(wheel)
    pages: dict[str, str] = {}
    for combo, wheels in by_combo.items():
        pages[combo.page] = render.find_links_page(combo, wheels)
        pages[combo.flat_page] = render.flat_page(combo, wheels)
    pages[f"{render.SIMPLE_DIR}/index.html"] = render.simple_root(by_project)
    for project, wheels in by_project.items():
        pages[f"{render.SIMPLE_DIR}/{project}/index.html"] = render.simple_project(project, wheels)
    projects = sorted(by_project) or ["opkiln"]
    title = "opkiln" if "opkiln" in by_project else projects[0]
    pages["index.html"] = render.landing_page(
        render.Site(project=title, base_url=manifest.base_url, combos=by_combo, pythons=pythons)
    )
    pages[MANIFEST_NAME] = manifest.to_json()
    pages[".nojekyll"] = ""  # GitHub Pages: serve every file as it is
    return pages


def _carry_over(old: Path, new: Path, skip: set[str]) -> None:
    """Hard-link every file of the old site into the new one, except those about to be rendered."""
    if not old.is_dir():
        return
    for root, dirs, files in os.walk(old):
        rel_root = Path(root).relative_to(old)
        target_root = new / rel_root
        for name in dirs:
            src = Path(root) / name
            if src.is_symlink():
                (target_root / name).symlink_to(src.readlink())
                continue
            (target_root / name).mkdir(exist_ok=True)
        dirs[:] = [d for d in dirs if not (Path(root) / d).is_symlink()]
        for name in files:
            rel = (rel_root / name).as_posix()
            if rel in skip:
                continue
            src = Path(root) / name
            dst = target_root / name
            if src.is_symlink():
                dst.symlink_to(src.readlink())
                continue
            try:
                os.link(src, dst)
            except OSError:
                shutil.copy2(src, dst)


def _copy_verified(src: Path, dst: Path, sha256: str) -> None:
    """Copy, hashing what is written: a wheel that changed since it was checked is refused."""
    digest = hashlib.sha256()
    with src.open("rb") as fin, dst.open("xb") as fout:
        while chunk := fin.read(_CHUNK):
            digest.update(chunk)
            fout.write(chunk)
    if digest.hexdigest() != sha256:
        raise IndexInputError(f"{src}: changed while it was being indexed; run again")
    dst.chmod(0o644)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    renameat2.restype = ctypes.c_int
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _swap_into_place(tmp: Path, out: Path) -> None:
    if not out.exists():
        tmp.rename(out)
        return
    if _exchange(tmp, out):
        shutil.rmtree(tmp)  # now the old site
        return
    old = out.with_name(f".{out.name}.old-{os.getpid()}")
    out.rename(old)
    try:
        tmp.rename(out)
    except BaseException:
        old.rename(out)
        raise
    shutil.rmtree(old)


__all__ = ["Auditor", "IndexResult", "build_index", "kiln_audit", "normalize_base_url", "scan_dist"]
