"""Round 2: faults mid-merge (ENOSPC, EROFS, SIGKILL), an OUT that is a mount point, file modes, and folders
kiln did not create.

After any fault: the exit code is 0, 1 or 2 with no traceback; "nothing written" is said only when the
site is byte-identical; every page links only files that are in place; a name listed on any page keeps
its bytes forever (no later run, after any fault, gives it other bytes); a rerun heals the site.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import random
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from index.synthetic_wheels import make_wheel, rezip
from trust.kiln_runs import KILN, kiln, outside, tree

NEW = "0.2.0+pt213cpu"
HREF = re.compile(r'href="(?:\.\./\.\./)?wheels/([^"#]+)#sha256=([0-9a-f]{64})"')


def listed(out: Path) -> dict[str, str]:
    """Every wheel some page links, with the sha256 the link states; each must be in place with those bytes."""
    found: dict[str, str] = {}
    for page in out.rglob("*.html"):
        if any(part.startswith(".") for part in page.relative_to(out).parts):
            continue  # kiln's scratch, not a page
        for name, digest in HREF.findall(page.read_text()):
            name = name.replace("%2B", "+")
            found[name] = digest
            path = out / "wheels" / name
            assert path.is_file(), f"{page} links {name}, which is not in place"
            assert hashlib.sha256(path.read_bytes()).hexdigest() == digest, f"{name}: not the bytes {page} states"
    return found


class History:
    """Every (name, sha256) ever listed: a listed name never gets other bytes."""

    def __init__(self) -> None:
        self.seen: dict[str, str] = {}

    def check(self, out: Path) -> None:
        for name, digest in listed(out).items():
            assert self.seen.setdefault(name, digest) == digest, f"{name} was listed with other bytes before"


def _truthful(run_stderr: str, before: dict[str, str], out: Path) -> None:
    if "nothing written" in run_stderr:
        assert tree(out) == before, "the message says nothing was written, but the site changed"


def _no_scratch(root: Path, out: Path) -> None:
    assert not [p for p in root.iterdir() if ".tmp-" in p.name], "staging left beside the site"
    assert not list(out.glob(".kiln-staging-*")), "staging left inside the site"
    assert not (out / ".kiln-merge-pending").exists()


@contextlib.contextmanager
def failing(call: str, at: int, error: int) -> Iterator[list[int]]:
    """Make the ``at``-th call of os.<call> (0-based) in this process fail with ``error``; yields the call count."""
    original = getattr(os, call)
    count = [0]

    def wrapper(*args: object, **kwargs: object) -> object:
        count[0] += 1
        if count[0] - 1 == at:
            raise OSError(error, os.strerror(error), str(args[-1]) if args else "")
        return original(*args, **kwargs)

    setattr(os, call, wrapper)
    try:
        yield count
    finally:
        setattr(os, call, original)


def _fresh(site: Path, where: Path) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    out = where / "site"
    shutil.copytree(site, out)
    return out


def _renames_of_a_merge(site: Path, dist: Path, scratch: Path) -> int:
    out = _fresh(site, scratch)
    with failing("rename", -1, 0) as count:
        assert kiln("index", dist, out).code == 0
    return count[0]


@pytest.mark.parametrize("error", [errno.EROFS, errno.ENOSPC, errno.EACCES])
def test_an_io_error_at_every_rename_of_a_merge(site: Path, tmp_path: Path, error: int) -> None:
    dist = tmp_path / "dist"
    total = _renames_of_a_merge(site, dist, tmp_path / "count")
    assert total >= 6
    for at in range(total):
        out = _fresh(site, tmp_path / f"at{at}")
        history = History()
        history.check(out)
        before = tree(out)
        with failing("rename", at, error):
            run = kiln("index", dist, out)
        assert run.code in (0, 2) and "Traceback" not in run.stderr, run.stderr
        _truthful(run.stderr, before, out)
        if run.code != 0:
            assert "nothing written" in run.stderr or "cut short" in run.stderr, run.stderr
        history.check(out)
        # Once listed, a rebuilt wheel with other bytes under that name is refused ...
        rebuilt = rezip(next(dist.glob("*.whl")), tmp_path / f"rebuilt{at}")
        if rebuilt.name in history.seen:
            again = kiln("index", rebuilt.parent, out)
            assert again.code == 1, again.stderr
            history.check(out)
        # ... and the plain rerun heals the site.
        healed = kiln("index", dist, out)
        assert healed.code == 0, healed.stderr
        history.check(out)
        assert NEW in "".join(listed(out))
        _no_scratch(out.parent, out)


def test_a_cut_short_message_says_what_pages_list(site: Path, tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    total = _renames_of_a_merge(site, dist, tmp_path / "count")
    out = _fresh(site, tmp_path / "late")
    with failing("rename", total - 2, errno.EROFS):  # the last page before the manifest
        run = kiln("index", dist, out)
    assert run.code == 2
    assert "nothing written" not in run.stderr
    assert "already list them" in run.stderr and "the next run finishes it" in run.stderr, run.stderr
    assert any(NEW in name for name in listed(out))


@pytest.mark.parametrize("at", range(8))
def test_enospc_at_every_write_of_a_merge(site: Path, tmp_path: Path, at: int) -> None:
    out = _fresh(site, tmp_path / "w")
    before = tree(out)
    with failing("write", at, errno.ENOSPC) as count:
        run = kiln("index", tmp_path / "dist", out)
    if count[0] <= at:
        pytest.skip(f"a merge makes only {count[0]} write(s)")
    assert run.code == 2 and "nothing written" in run.stderr, run.stderr
    assert tree(out) == before
    assert kiln("index", tmp_path / "dist", out).code == 0


def _mount(*args: str) -> None:
    result = subprocess.run(["mount", *args], capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"mount {' '.join(args)}: {result.stderr.strip()}")


@contextlib.contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir(parents=True, exist_ok=True)
    _mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where))
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_full_disk_at_many_fill_levels(tmp_path: Path) -> None:
    """A real small tmpfs, filled to leave 0 - 60 KiB: each merge either lands or says truthfully that
    nothing was written; freeing the space heals it."""
    make_wheel(tmp_path / "dist0")
    make_wheel(tmp_path / "dist", version=NEW, extra_files={"opkiln/blob.bin": os.urandom(20_000)})
    with tmpfs(tmp_path / "disk", "1m") as disk:
        history = History()
        assert kiln("index", tmp_path / "dist0", disk / "site").code == 0
        pristine = tmp_path / "pristine"
        shutil.copytree(disk / "site", pristine)
        for left in range(0, 64 * 1024, 8 * 1024):
            shutil.rmtree(disk / "site")
            shutil.copytree(pristine, disk / "site")
            filler = disk / "filler"
            st = os.statvfs(disk)
            with contextlib.suppress(OSError), filler.open("wb") as fh:
                fh.write(bytes(max(st.f_bavail * st.f_frsize - left, 0)))
            before = tree(disk / "site")
            run = kiln("index", tmp_path / "dist", disk / "site")
            assert run.code in (0, 2) and "Traceback" not in run.stderr, run.stderr
            _truthful(run.stderr, before, disk / "site")
            history.check(disk / "site")
            filler.unlink()
            assert kiln("index", tmp_path / "dist", disk / "site").code == 0
            history.check(disk / "site")
            _no_scratch(disk, disk / "site")


def test_a_read_only_subfolder_mid_merge(site: Path, tmp_path: Path) -> None:
    """A real read-only bind mount on the page folder of the new wheel's combination (root ignores modes)."""
    pages = site / "cpu" / "torch2.13"
    _mount("--bind", str(pages), str(pages))
    try:
        _mount("-o", "remount,ro,bind", str(pages))
        history = History()
        history.check(site)
        before = tree(site)
        run = kiln("index", tmp_path / "dist", site)
        assert run.code == 2 and "Traceback" not in run.stderr, run.stderr
        _truthful(run.stderr, before, site)
        history.check(site)
        again = kiln("index", tmp_path / "dist", site)  # still read-only: fails the same way, the site sound
        assert again.code == 2
        history.check(site)
    finally:
        subprocess.run(["umount", str(pages)], check=False)
    assert kiln("index", tmp_path / "dist", site).code == 0
    history.check(site)
    _no_scratch(site.parent, site)


def test_out_may_be_a_mount_point(tmp_path: Path) -> None:
    make_wheel(tmp_path / "dist0")
    make_wheel(tmp_path / "dist", version=NEW)
    with tmpfs(tmp_path / "volume", "4m") as out:
        first = kiln("index", tmp_path / "dist0", out)
        assert first.code == 0, first.stderr
        second = kiln("index", tmp_path / "dist", out)
        assert second.code == 0, second.stderr
        assert len(listed(out)) == 2
        _no_scratch(tmp_path, out)
        assert kiln("index", tmp_path / "dist", out).code == 0


def test_site_modes_are_fixed_not_the_umask(tmp_path: Path) -> None:
    make_wheel(tmp_path / "dist0")
    make_wheel(tmp_path / "dist", version=NEW)
    old = os.umask(0o077)
    try:
        assert kiln("index", tmp_path / "dist0", tmp_path / "site").code == 0
        assert kiln("index", tmp_path / "dist", tmp_path / "site").code == 0
    finally:
        os.umask(old)
    for path in [tmp_path / "site", *(tmp_path / "site").rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o755 if path.is_dir() else 0o644), f"{path}: {oct(mode)}"


def test_kiln_never_deletes_a_folder_it_did_not_create(site: Path, tmp_path: Path) -> None:
    """Folders named like kiln's staging, beside OUT and inside it, made by someone else, survive every run."""
    lookalikes = [tmp_path / ".site.tmp-backup", tmp_path / ".site.old-1234", site / ".kiln-staging-mine"]
    for folder in lookalikes:
        folder.mkdir()
        (folder / "keep").write_text("mine")
    assert kiln("index", tmp_path / "dist", site).code == 0
    for folder in lookalikes:
        assert (folder / "keep").read_text() == "mine"


def test_sigkill_at_random_points_over_many_runs(tmp_path: Path) -> None:
    """Kill `kiln index` (a real process) at random points; after each kill every listed name keeps its
    bytes, pages link only files in place, and the next full run lands and leaves no scratch."""
    rng = random.Random(19)
    make_wheel(tmp_path / "dist0")
    out = tmp_path / "site"
    assert kiln("index", tmp_path / "dist0", out).code == 0
    history = History()
    history.check(out)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    for step in range(10):
        dist = tmp_path / f"dist{step + 1}"
        make_wheel(dist, version=f"0.{step + 2}.0+pt213cpu", extra_files={"opkiln/blob.bin": os.urandom(200_000)})
        proc = subprocess.Popen([sys.executable, str(KILN), "index", str(dist), str(out)], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(rng.uniform(0.15, 0.9))
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        _out, err = proc.communicate(timeout=60)
        assert b"Traceback" not in err
        history.check(out)
        rebuilt = rezip(next(dist.glob("*.whl")), tmp_path / f"rebuilt{step}")
        if rebuilt.name in history.seen:  # published by the killed run: other bytes are refused
            assert kiln("index", rebuilt.parent, out).code == 1
        assert kiln("index", dist, out).code == 0
        history.check(out)
        assert any(f"0.{step + 2}.0" in name for name in listed(out))
        _no_scratch(tmp_path, out)


def test_a_refused_run_after_a_crash_changes_nothing_outside(site: Path, tmp_path: Path) -> None:
    bad = make_wheel(tmp_path / "bad", version="0.3.0+pt213cpu", extra_files={"evil.pth": b""})
    before = outside(tmp_path, site)
    assert kiln("index", bad.parent, site).code == 2
    assert outside(tmp_path, site) == before
