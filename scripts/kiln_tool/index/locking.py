"""Who may write an index: one run per output folder, and a staging folder lives as long as its run.

The lock is keyed on the canonical output path (symlinks resolved, normalized; the folder need
not exist yet): a file named by the sha256 of that path in one lock folder, so two runs for one
OUT meet at one lock however many of OUT's parents they find already created. Each staging folder
is flock-ed by the run that made it for as long as it lives; a later run removes only staging
folders whose lock it can take, i.e. whose run has ended (the kernel drops a dead process's locks).
"""

# ruff: noqa: PTH208

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .errors import IndexInputError

LOCK_DIR_ENV = "KILN_LOCK_DIR"


def lock_dir() -> Path:
    """$KILN_LOCK_DIR, else kiln-locks-<uid> in the temporary folder; runs on one OUT must share it."""
    configured = os.environ.get(LOCK_DIR_ENV)
    return Path(configured) if configured else Path(tempfile.gettempdir()) / f"kiln-locks-{os.getuid()}"


def lock_path(out: Path) -> Path:
    canonical = os.path.realpath(out)
    return lock_dir() / f"index-{hashlib.sha256(os.fsencode(canonical)).hexdigest()[:32]}.lock"


def _private_dir(directory: Path) -> None:
    """Create the lock folder, or accept it only as a real folder of ours that no one else may write."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.lstat(directory)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise IndexInputError(f"lock folder {directory} is not a private folder of this user "
                              f"(set {LOCK_DIR_ENV} to one)")


@contextlib.contextmanager
def output_lock(out: Path) -> Iterator[Path]:
    """Hold the exclusive lock of ``out`` (blocking until another run on it ends)."""
    path = lock_path(out)
    _private_dir(path.parent)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise IndexInputError(f"cannot open the lock {path}: {exc.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield path
    finally:
        os.close(fd)


def staging_prefixes(out: Path) -> tuple[str, str]:
    return f".{out.name}.tmp-", f".{out.name}.old-"


@dataclass
class Staging:
    """A folder beside OUT where a run builds its work, locked by that run while it lives."""

    path: Path
    fd: int

    @classmethod
    def create(cls, out: Path) -> Staging:
        path = Path(tempfile.mkdtemp(prefix=staging_prefixes(out)[0], dir=out.parent))
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return cls(path, fd)

    def remove(self) -> None:
        """Remove the folder (whatever is still in it), then let go of its lock."""
        if self.fd < 0:
            return
        try:
            shutil.rmtree(self.path, ignore_errors=True)
        finally:
            os.close(self.fd)
            self.fd = -1


def remove_stale_staging(out: Path) -> list[Path]:
    """Remove the staging folders of ``out`` whose run has ended; return what was removed."""
    parent = out.parent
    if not parent.is_dir():
        return []
    removed = []
    prefixes = staging_prefixes(out)
    for name in sorted(os.listdir(parent)):
        if not name.startswith(prefixes):
            continue
        path = parent / name
        if path.is_symlink() or not path.is_dir():
            continue
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # its run is alive
            shutil.rmtree(path)
            removed.append(path)
        finally:
            os.close(fd)
    return removed


__all__ = ["LOCK_DIR_ENV", "Staging", "lock_dir", "lock_path", "output_lock", "remove_stale_staging"]
