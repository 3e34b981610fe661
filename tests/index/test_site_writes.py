"""How `kiln index` writes a file of the site (index/publish.py _write_file, _Writer): only as a new file, never
over one or through a link, at mode 0644 whatever the umask; written in batches on a worker thread, every
batch's failure raised, and METADATA shared by several wheels written once and hard-linked."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kiln_tool.index.publish import _write_file, _Writer


def test_a_file_is_written_new_at_0644_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        _write_file(str(tmp_path / "page.html"), b"<p>x</p>")
    finally:
        os.umask(old)
    assert (tmp_path / "page.html").read_bytes() == b"<p>x</p>"
    assert (tmp_path / "page.html").stat().st_mode & 0o777 == 0o644


def test_a_file_is_never_written_over_an_existing_one_or_through_a_link(tmp_path: Path) -> None:
    existing = tmp_path / "existing"
    existing.write_bytes(b"kept")
    with pytest.raises(FileExistsError):
        _write_file(str(existing), b"new")
    assert existing.read_bytes() == b"kept"
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(FileExistsError):
        _write_file(str(link), b"new")
    assert not (tmp_path / "elsewhere").exists()


def test_many_files_are_written_in_batches_and_all_land(tmp_path: Path) -> None:
    writer = _Writer()
    count = 2 * _Writer.BATCH + 5
    for i in range(count):
        writer.write(str(tmp_path / f"f{i}"), f"{i}".encode())
    writer.finish()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"f{i}" for i in range(count))
    assert all((tmp_path / f"f{i}").read_bytes() == f"{i}".encode() for i in range(count))


def test_a_failed_write_in_any_batch_is_raised_by_finish(tmp_path: Path) -> None:
    writer = _Writer()
    for i in range(_Writer.BATCH):
        writer.write(str(tmp_path / f"f{i}"), b"x")
    writer.write(str(tmp_path / "no-such-folder" / "f"), b"x")  # in the second batch, sent by finish()
    with pytest.raises(FileNotFoundError):
        writer.finish()
    writer = _Writer()
    writer.write(str(tmp_path / "f0"), b"again")  # the first batch (full): exists already
    for i in range(1, _Writer.BATCH):
        writer.write(str(tmp_path / f"g{i}"), b"x")
    with pytest.raises(FileExistsError):
        writer.finish()


def test_metadata_shared_by_several_wheels_is_written_once_and_linked(tmp_path: Path) -> None:
    writer = _Writer()
    writer.write_shared(str(tmp_path / "a.metadata"), b"Metadata-Version: 2.1\n", "digest-1")
    writer.write_shared(str(tmp_path / "b.metadata"), b"Metadata-Version: 2.1\n", "digest-1")
    writer.write_shared(str(tmp_path / "c.metadata"), b"Metadata-Version: 2.4\n", "digest-2")
    writer.finish()
    a, b, c = (tmp_path / f"{n}.metadata" for n in "abc")
    assert a.read_bytes() == b.read_bytes() == b"Metadata-Version: 2.1\n"
    assert a.stat().st_ino == b.stat().st_ino and a.stat().st_nlink == 2
    assert c.stat().st_ino != a.stat().st_ino and c.read_bytes() == b"Metadata-Version: 2.4\n"


def test_batches_are_written_in_order_so_a_link_never_precedes_its_file(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """One worker: the link to a METADATA first written in an earlier batch runs after that batch, however slow
    the earlier batch is (with two workers the link would race it)."""
    import time

    from kiln_tool.index import publish

    write_batch = publish._write_batch

    def slow_first(batch: list[tuple[str, bytes | str]]) -> None:
        if any(path.endswith("first.metadata") for path, _what in batch):
            time.sleep(0.3)
        write_batch(batch)

    monkeypatch.setattr(publish, "_write_batch", slow_first)
    writer = _Writer()
    writer.write_shared(str(tmp_path / "first.metadata"), b"shared", "digest")
    for i in range(_Writer.BATCH - 1):
        writer.write(str(tmp_path / f"f{i}"), b"x")
    writer.write_shared(str(tmp_path / "second.metadata"), b"shared", "digest")  # the second batch: a link
    writer.finish()
    assert (tmp_path / "second.metadata").read_bytes() == b"shared"
