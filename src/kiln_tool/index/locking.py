"""Who may write an index: one run per output folder, and a staging folder lives as long as its run.

The lock is keyed on the canonical output path (symlinks resolved, normalized; the folder need
not exist yet): a file named by the sha256 of that path in one lock folder, so two runs for one
OUT meet at one lock however many of OUT's parents they find already created. Each staging folder
is flock-ed by the run that made it for as long as it lives; a later run removes only staging
folders whose lock it can take, i.e. whose run has ended (the kernel drops a dead process's locks).
"""


from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
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


STAGING_INSIDE = ".kiln-staging-"


def staging_prefix(out: Path) -> str:
    return f".{out.name}.tmp-"


def _records(out: Path) -> Path:
    """Where the staging folders made for ``out`` are recorded: beside its lock, in the private lock folder."""
    return lock_path(out).with_suffix(".staging")


def _read_records(out: Path) -> list[dict[str, object]]:
    try:
        text = _records(out).read_text(encoding="utf-8")
    except OSError:
        return []
    found = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("path"), str) and isinstance(record.get("dev"), int) \
                and isinstance(record.get("ino"), int):
            found.append(record)
    return found


def _write_records(out: Path, records: list[dict[str, object]]) -> None:
    path = _records(out)
    if not records:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return
    temp = path.with_name(f"{path.name}.{os.getpid()}")
    temp.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records), encoding="utf-8")
    temp.replace(path)


@dataclass
class Staging:
    """A folder where a run builds its work, locked by that run while it lives.

    Its path, device and inode are recorded in the private lock folder before anything is written
    into it: that record, not a name pattern, is what lets a later run remove it. A folder kiln did
    not create (whatever its name) is never deleted.
    """

    path: Path
    fd: int
    out: Path
    moved: bool = False

    @classmethod
    def create(cls, out: Path, inside: bool = False) -> Staging:
        """Beside ``out`` (a new site, renamed into place), or inside it (a merge: same file system as the
        site even when ``out`` is a mount point)."""
        parent, prefix = (out, STAGING_INSIDE) if inside else (out.parent, staging_prefix(out))
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
            fcntl.flock(fd, fcntl.LOCK_EX)
            st = os.fstat(fd)
            _write_records(out, [*_read_records(out), {"path": os.fspath(path), "dev": st.st_dev, "ino": st.st_ino}])
        except BaseException:
            with contextlib.suppress(OSError):
                path.rmdir()
            raise
        return cls(path, fd, out)

    def renamed(self) -> None:
        """The folder became the site (one rename): nothing of it is left to remove."""
        self.moved = True

    def remove(self) -> None:
        """Remove the folder (whatever is still in it), then let go of its lock and its record."""
        if self.fd < 0:
            return
        try:
            if not self.moved:
                shutil.rmtree(self.path, ignore_errors=True)
        finally:
            os.close(self.fd)
            self.fd = -1
            with contextlib.suppress(OSError):
                _write_records(self.out, [r for r in _read_records(self.out) if r["path"] != os.fspath(self.path)])


def remove_stale_staging(out: Path) -> list[Path]:
    """Remove the staging folders recorded for ``out`` whose run has ended; return what was removed.

    A folder is removed only when it is the very folder recorded (same path, device and inode) and its
    lock can be taken (its run is gone). Records of folders that are gone are dropped.
    """
    records = _read_records(out)
    if not records:
        return []
    removed = []
    kept = []
    for record in records:
        path = Path(str(record["path"]))
        try:
            st = os.lstat(path)
        except OSError:
            continue  # gone (or renamed into place as the site): nothing to remove, the record goes
        if not stat.S_ISDIR(st.st_mode) or (st.st_dev, st.st_ino) != (record["dev"], record["ino"]):
            continue  # something else now has that name: not ours, never deleted
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            kept.append(record)
            continue
        try:
            if (os.fstat(fd).st_dev, os.fstat(fd).st_ino) != (st.st_dev, st.st_ino):
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                kept.append(record)  # its run is alive
                continue
            shutil.rmtree(path)
            removed.append(path)
        finally:
            os.close(fd)
    _write_records(out, kept)
    return removed


__all__ = ["LOCK_DIR_ENV", "STAGING_INSIDE", "Staging", "lock_dir", "lock_path", "output_lock",
           "remove_stale_staging"]
