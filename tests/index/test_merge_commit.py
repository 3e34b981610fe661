"""How a merge into an existing site commits (index/publish.py _merge_in_place, _roll_forward, _pages_of),
in this process with faults injected at every step: an error before the first rename leaves the site as it
was (folders too); an error at any later rename says exactly how far the merge got, every page still links
only files in place, and the next run finishes the merge, whatever it is given. A merge renames the
manifest last, re-renders the site-wide pages, and a run with nothing new renames nothing.

tests/trust/test_faults.py kills real `kiln index` processes at random points; these cases reach each
step deterministically (and where mutation testing sees them, docs/mutation.md)."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote

import pytest

from index.synthetic_wheels import make_wheel
from kiln_tool.index import build_index
from kiln_tool.index.errors import IndexInputError
from kiln_tool.index.manifest import MANIFEST_NAME
from kiln_tool.index.publish import PENDING_MARKER, MergeCutShortError
from trust.kiln_runs import tree

BASE = "https://example.org/opkiln/"
FIRST = "opkiln-0.1.0+pt213cpu-cp311-cp311-linux_x86_64.whl"


def _new_dist(root: Path) -> Path:
    """Two new wheels: one for the published combination, one for a new one (folders the merge creates)."""
    dist = root / "dist-new"
    make_wheel(dist, version="0.2.0+pt213cpu")
    make_wheel(dist, version="0.2.0+pt214cu130", cuda_tag="cu130", torch_major_minor="2.14",
               torch_requirement="torch<2.15,>=2.14")
    return dist


def _published(root: Path, name: str = "site") -> Path:
    out = root / name
    make_wheel(root / "dist-first")
    build_index(root / "dist-first", out, BASE, audit=None)
    return out


@contextmanager
def _renames(fail_at: int | None = None, unlink_fails: str | None = None,
             rmdir_fails: bool = False) -> Iterator[list[tuple[str, str]]]:
    """Every os.rename of the run (source, target), the one numbered ``fail_at`` (from 1) failing with
    ENOSPC before it happens; ``unlink_fails``: the unlink of a path ending so fails; ``rmdir_fails``: every
    os.rmdir fails (EBUSY)."""
    calls: list[tuple[str, str]] = []
    rename, unlink, rmdir = os.rename, os.unlink, os.rmdir

    def counted(src: str | Path, dst: str | Path) -> None:
        calls.append((os.fspath(src), os.fspath(dst)))
        if len(calls) == fail_at:
            raise OSError(errno.ENOSPC, "No space left on device", os.fspath(dst))
        rename(src, dst)

    def unlinking(path: str | Path, *args: object, **kwargs: object) -> None:
        if unlink_fails is not None and os.fspath(path).endswith(unlink_fails):
            raise OSError(errno.EIO, "Input/output error", os.fspath(path))
        unlink(path, *args, **kwargs)  # type: ignore[arg-type]

    def removing(path: str | Path, *args: object, **kwargs: object) -> None:
        if rmdir_fails:
            raise OSError(errno.EBUSY, "Device or resource busy", os.fspath(path))
        rmdir(path, *args, **kwargs)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "rename", counted)
        patch.setattr(os, "unlink", unlinking)
        patch.setattr(os, "rmdir", removing)
        yield calls


def _listed(out: Path) -> list[str]:
    return sorted(w["filename"] for w in json.loads((out / MANIFEST_NAME).read_text())["wheels"])


def _links_in_place(out: Path) -> None:
    """Every wheel a page links is a file of the site."""
    for page in out.rglob("*.html"):
        for href in re.findall(r'href="([^"#]+\.whl)', page.read_text()):
            assert (page.parent / unquote(href)).resolve().is_file(), (page, href)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], list[tuple[str, str]]]:
    """The published site, and what an uninterrupted merge of the new wheels makes of it (and its renames)."""
    root = tmp_path_factory.mktemp("reference")
    before = _published(root)
    pristine = root / "pristine"
    shutil.copytree(before, pristine, symlinks=True)
    with _renames() as calls:
        build_index(_new_dist(root), before, audit=None)
    return pristine, tree(before), [(os.path.relpath(s, before), os.path.relpath(t, before)) for s, t in calls]


def test_a_merge_renames_the_journal_first_then_wheels_then_pages_and_the_manifest_last(
        reference: tuple[Path, dict[str, str], list[tuple[str, str]]]) -> None:
    _pristine, _after, renames = reference
    targets = [t for _s, t in renames]
    assert targets[0] == PENDING_MARKER
    wheels = [t for t in targets if t.startswith("wheels/")]
    assert targets[1:1 + len(wheels)] == wheels and len(wheels) == 4  # two wheels and their .metadata
    assert targets[-1] == MANIFEST_NAME
    pages = targets[1 + len(wheels):-1]
    assert len(pages) > 5  # so that a cut late in the merge shows five pages and ", ..."
    assert pages == sorted(pages) and "index.html" in pages and "simple/opkiln/index.html" in pages
    assert "cpu/torch2.13/index.html" in pages and "cu130/torch2.14/index.html" in pages
    assert "simple/index.html" not in pages  # the project was known: its root entry is as it was


def _copy(pristine: Path, tmp_path: Path) -> Path:
    out = tmp_path / "site"
    shutil.copytree(pristine, out, symlinks=True)
    return out


def test_an_error_before_the_first_rename_leaves_the_site_as_it_was(
        reference: tuple[Path, dict[str, str], list[tuple[str, str]]], tmp_path: Path) -> None:
    pristine, _after, _renames_made = reference
    out = _copy(pristine, tmp_path)
    before = tree(out)
    with _renames(fail_at=1), pytest.raises(OSError, match="No space left on device"):
        build_index(_new_dist(tmp_path), out, audit=None)
    assert tree(out) == before  # every file and folder: no cu130/torch2.14/ left behind


def test_the_first_error_is_the_one_reported_when_cleaning_up_fails_too(
        reference: tuple[Path, dict[str, str], list[tuple[str, str]]], tmp_path: Path) -> None:
    pristine, _after, _renames_made = reference
    out = _copy(pristine, tmp_path)
    with _renames(fail_at=1, rmdir_fails=True), pytest.raises(OSError, match="No space left on device"):
        build_index(_new_dist(tmp_path), out, audit=None)
    assert _listed(out) == [FIRST]


def _cut_at(k: int, pristine: Path, tmp_path: Path) -> tuple[Path, str]:
    out = _copy(pristine, tmp_path)
    with _renames(fail_at=k), pytest.raises(MergeCutShortError) as caught:
        build_index(_new_dist(tmp_path), out, audit=None)
    return out, str(caught.value)


def _expected_message(k: int, renames: list[tuple[str, str]]) -> tuple[str, str]:
    done = k - 2  # the journal's rename comes first and is not counted
    total = len(renames) - 1
    moves = sum(1 for _s, t in renames if t.startswith("wheels/"))
    counts = f"after {done} of {total} rename(s): {min(done, moves) // 2} of {moves // 2} new wheel(s) are in place"
    listed = [t for _s, t in renames[1 + moves:k - 1]]  # pages renamed before the cut (the manifest is last)
    if listed:
        shown = ", ".join(listed[:5]) + (", ..." if len(listed) > 5 else "")
        where = f"{len(listed)} page(s) already list them ({shown}): they are published, and their names keep " \
                "these bytes"
    else:
        where = "no page lists them yet"
    return counts, f"are in place, {where}. Every page still links only files that are in place;"


def test_a_merge_cut_short_at_each_rename_says_how_far_it_got_and_the_next_run_finishes_it(
        reference: tuple[Path, dict[str, str], list[tuple[str, str]]], tmp_path: Path) -> None:
    _pristine, _after, renames = reference
    for k in range(2, len(renames) + 1):  # the first rename (the journal's) is the case above
        _cut_then_finish(k, reference, tmp_path / str(k))


def _cut_then_finish(k: int, reference: tuple[Path, dict[str, str], list[tuple[str, str]]], tmp_path: Path) -> None:
    pristine, after, renames = reference
    tmp_path.mkdir()
    out, message = _cut_at(k, pristine, tmp_path)
    counts, where = _expected_message(k, renames)
    assert counts in message and where in message, message
    assert f"{PENDING_MARKER} records the merge and the next run finishes it" in message
    assert (out / PENDING_MARKER).is_file()
    _links_in_place(out)

    said: list[str] = []
    empty = tmp_path / "nothing-new"
    empty.mkdir()
    build_index(empty, out, audit=None, log=said.append)  # given nothing: it still finishes the merge
    moved = {Path(t).name for _s, t in renames[1:k - 1] if t.startswith("wheels/")}
    complete = sorted(n for n in moved if n.endswith(".whl") and f"{n}.metadata" in moved)
    assert _listed(out) == sorted([FIRST, *complete])
    if complete:
        assert f"finishing a merge that was cut short: {', '.join(complete)}" in said
    else:
        assert not any("cut short" in line for line in said)
    assert not (out / PENDING_MARKER).exists()
    _links_in_place(out)
    assert json.loads((out / MANIFEST_NAME).read_text())["base_url"] == BASE

    build_index(_new_dist(tmp_path), out, audit=None)  # and given the wheels again: the uninterrupted site
    assert tree(out) == after


def test_a_merge_cut_after_its_last_rename_is_finished_by_removing_the_journal(
        reference: tuple[Path, dict[str, str], list[tuple[str, str]]], tmp_path: Path) -> None:
    pristine, after, renames = reference
    out = _copy(pristine, tmp_path)
    with _renames(unlink_fails=PENDING_MARKER), pytest.raises(MergeCutShortError) as caught:
        build_index(_new_dist(tmp_path), out, audit=None)
    total = len(renames) - 1
    assert f"after {total} of {total} rename(s): 2 of 2 new wheel(s) are in place" in str(caught.value)
    assert tree(out) == {**after, PENDING_MARKER: tree(out)[PENDING_MARKER]}
    with _renames() as calls:
        build_index(_new_dist(tmp_path), out, audit=None)
    assert calls == [] and tree(out) == after


def test_a_first_merge_into_an_empty_folder_keeps_its_base_url_when_finished(tmp_path: Path) -> None:
    """A mount point: merged into, never replaced. Cut before the manifest lands, the base URL is in the
    journal alone; the next run (without --base-url) keeps it."""
    out = tmp_path / "mount"
    out.mkdir()
    make_wheel(tmp_path / "dist")
    with _renames() as calls:
        build_index(tmp_path / "dist", out, BASE, audit=None)
    last = len(calls)
    shutil.rmtree(out)
    out.mkdir()
    with _renames(fail_at=last), pytest.raises(MergeCutShortError):
        build_index(tmp_path / "dist", out, BASE, audit=None)
    assert not (out / MANIFEST_NAME).exists()
    said: list[str] = []
    build_index(tmp_path / "dist", out, audit=None, log=said.append)
    assert json.loads((out / MANIFEST_NAME).read_text())["base_url"] == BASE
    assert f"finishing a merge that was cut short: {FIRST}" in said
    assert _listed(out) == [FIRST]


def test_a_run_with_nothing_new_renames_nothing(tmp_path: Path) -> None:
    out = _published(tmp_path)
    before = tree(out)
    with _renames() as calls:
        result = build_index(tmp_path / "dist-first", out, audit=None)
    assert calls == [] and result.added == [] and result.unchanged == [FIRST]
    assert tree(out) == before


def test_each_merge_renders_the_site_wide_pages_again(tmp_path: Path) -> None:
    """A site-wide page lost (or from an older kiln) is written again by the next merge that adds a wheel."""
    out = _published(tmp_path)
    for page in ("index.html", ".nojekyll"):
        (out / page).unlink()
    make_wheel(tmp_path / "dist2", version="0.2.0+pt213cpu")
    build_index(tmp_path / "dist2", out, audit=None)
    assert (out / ".nojekyll").read_text() == ""
    assert "cpu/torch2.13/" in (out / "index.html").read_text()


def test_the_first_merge_into_an_empty_folder_lists_the_project_in_the_simple_root(tmp_path: Path) -> None:
    out = tmp_path / "mount"
    out.mkdir()
    make_wheel(tmp_path / "dist")
    build_index(tmp_path / "dist", out, audit=None)
    assert 'href="opkiln/"' in (out / "simple" / "index.html").read_text()
    assert "<title>Links for opkiln</title>" in (out / "simple" / "opkiln" / "index.html").read_text()
    assert "pip install opkiln -f " in (out / "index.html").read_text()


def test_every_unusable_file_is_on_its_own_line(tmp_path: Path) -> None:
    from kiln_tool.index.errors import IndexInputError

    dist = tmp_path / "dist"
    dist.mkdir()
    (dist / "a-folder").mkdir()  # first in DIST: the files after it are still judged
    (dist / "a.txt").write_text("x")
    (dist / "b.txt").write_text("y")
    with pytest.raises(IndexInputError) as caught:
        build_index(dist, tmp_path / "site", audit=None)
    lines = str(caught.value).splitlines()
    assert lines[0] == f"3 unusable file(s) in {dist.resolve()}:"
    assert len(lines) == 4, lines
    assert lines[1].startswith("  'a-folder': not a wheel file"), lines
    assert lines[2].startswith("  'a.txt': not a wheel") and lines[3].startswith("  'b.txt': not a wheel"), lines


def test_a_base_url_without_its_last_slash_is_given_one(tmp_path: Path) -> None:
    make_wheel(tmp_path / "dist")
    build_index(tmp_path / "dist", tmp_path / "site", "https://example.org/opkiln", audit=None)
    assert json.loads((tmp_path / "site" / MANIFEST_NAME).read_text())["base_url"] == "https://example.org/opkiln/"



def test_a_wheel_over_16_mib_is_published_as_the_bytes_it_was_hashed_from(tmp_path: Path) -> None:
    """Large wheels are copied in chunks, hashed as written (index/publish.py copy_hashed), not read whole."""
    import hashlib
    import random
    import tracemalloc

    blob = random.Random(26).randbytes(17 << 20)  # incompressible: the wheel is over 16 MiB
    wheel = make_wheel(tmp_path / "dist", extra_files={"opkiln/blob.bin": blob})
    assert wheel.stat().st_size > 16 << 20
    del blob
    out = tmp_path / "site"
    tracemalloc.start()
    try:
        build_index(tmp_path / "dist", out, audit=None)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"peak {peak / 2**20:.1f} MiB: the 17 MiB wheel was held whole"
    published = out / "wheels" / wheel.name
    assert published.read_bytes() == wheel.read_bytes()
    assert published.stat().st_mode & 0o777 == 0o644
    (entry,) = json.loads((out / MANIFEST_NAME).read_text())["wheels"]
    assert entry["sha256"] == hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert entry["size"] == wheel.stat().st_size


def test_a_stray_file_under_a_new_wheels_name_is_never_written_over(tmp_path: Path) -> None:
    """A file in wheels/ that kiln did not list (another tool, a run of an older kiln) under the name of a new
    wheel: other bytes are a clash, nothing written; the very bytes are taken as that wheel."""
    from kiln_tool.index.errors import IndexConflictError

    out = _published(tmp_path)
    new = make_wheel(tmp_path / "dist2", version="0.2.0+pt213cpu")
    stray = out / "wheels" / new.name
    stray.write_bytes(b"someone else's bytes")
    before = tree(out)
    with pytest.raises(IndexConflictError, match=re.escape(f"{new.name}: {stray} already holds other bytes")):
        build_index(tmp_path / "dist2", out, audit=None)
    assert tree(out) == before
    stray.unlink()
    shutil.copy(new, stray)
    build_index(tmp_path / "dist2", out, audit=None)
    assert _listed(out) == sorted([FIRST, new.name]) and stray.read_bytes() == new.read_bytes()


def test_a_second_name_of_one_distribution_is_served_by_the_first(tmp_path: Path) -> None:
    """0.1.0.0 is 0.1.0 (PEP 440): a second name for a published or an incoming wheel is never a second copy,
    and the wheels after it in DIST are still added."""
    out = _published(tmp_path)
    dist = tmp_path / "dist2"
    second = make_wheel(dist, version="0.2.0+pt213cpu")
    shutil.copy(tmp_path / "dist-first" / FIRST, dist / FIRST.replace("0.1.0+", "0.1.0.0+"))
    shutil.copy(second, dist / second.name.replace("0.2.0+", "0.2.0.0+"))
    result = build_index(dist, out, audit=None)
    assert [w.filename for w in result.added] == [second.name]
    assert result.unchanged == [f"{FIRST.replace('0.1.0+', '0.1.0.0+')} (as {FIRST})",
                                f"{second.name.replace('0.2.0+', '0.2.0.0+')} (as {second.name})"]
    assert _listed(out) == sorted([FIRST, second.name])


def test_every_published_file_is_checked_before_a_merge_in_a_large_site_too(tmp_path: Path) -> None:
    """Over 64 wheels the published files are checked on four threads: the same verdicts, every one listed."""
    from kiln_tool.index.errors import IndexIntegrityError

    dist = tmp_path / "dist"
    for i in range(70):
        make_wheel(dist, version=f"0.1.{i}+pt213cpu")
    out = tmp_path / "site"
    build_index(dist, out, audit=None)
    names = sorted(p.name for p in dist.iterdir())
    for name in (names[3], names[65]):  # same size, other bytes
        target = out / "wheels" / name
        data = bytearray(target.read_bytes())
        data[-1] ^= 0xFF
        target.write_bytes(bytes(data))
    make_wheel(tmp_path / "dist2", version="0.2.0+pt213cpu")
    with pytest.raises(IndexIntegrityError) as caught:
        build_index(tmp_path / "dist2", out, audit=None)
    altered = [line.strip() for line in str(caught.value).splitlines()[1:]]
    assert [line.split(" (sha256 ")[0] for line in altered] == [str(out / "wheels" / names[3]),
                                                                  str(out / "wheels" / names[65])]


def test_a_missing_or_replaced_published_file_is_named_whole(tmp_path: Path) -> None:
    from kiln_tool.index.errors import IndexIntegrityError

    out = _published(tmp_path)
    make_wheel(tmp_path / "dist2", version="0.2.0+pt213cpu")
    wheel = out / "wheels" / FIRST
    saved = wheel.read_bytes(), (out / "wheels" / f"{FIRST}.metadata").read_bytes()
    wheel.unlink()
    (out / "wheels" / f"{FIRST}.metadata").unlink()
    with pytest.raises(IndexInputError) as caught:
        build_index(tmp_path / "dist2", out, audit=None)
    assert str(caught.value).splitlines()[1:] == [f"  {wheel} (missing)", f"  {wheel}.metadata (missing)"]
    wheel.write_bytes(saved[0])
    (out / "wheels" / f"{FIRST}.metadata").mkdir()  # a folder where the METADATA was
    with pytest.raises(IndexIntegrityError, match=re.escape(f"{wheel}.metadata (not a regular file: a link or a "
                                                            "folder, not the published file)")):
        build_index(tmp_path / "dist2", out, audit=None)


def test_the_staging_folder_of_a_run_that_died_is_removed_and_said(tmp_path: Path) -> None:
    from kiln_tool.index.locking import Staging

    out = _published(tmp_path)
    dead = Staging.create(out, inside=True)
    (dead.path / "half-written").write_bytes(b"x")
    os.close(dead.fd)  # the run is gone: its lock with it
    said: list[str] = []
    make_wheel(tmp_path / "dist2", version="0.2.0+pt213cpu")
    build_index(tmp_path / "dist2", out, audit=None, log=said.append)
    assert f"removed {dead.path} (left by an interrupted run)" in said
    assert not dead.path.exists()


def test_the_landing_page_offers_every_python_of_the_matrix(tmp_path: Path) -> None:
    """data/matrix.json's Pythons, not only those the published wheels are for (the chooser says which have
    wheels)."""
    make_wheel(tmp_path / "dist")  # cp311 only
    build_index(tmp_path / "dist", tmp_path / "site", audit=None)
    page = (tmp_path / "site" / "index.html").read_text()
    matrix = Path(__file__).resolve().parents[2] / "src" / "kiln_tool" / "data" / "matrix.json"
    for python in json.loads(matrix.read_text())["python"]:
        assert f'"{python}"' in page, python


def test_render_all_writes_every_page_of_a_site_that_holds_only_its_manifest(tmp_path: Path) -> None:
    """A release fetches the published manifest alone (index/fetch.py) and deploys the folder whole: every page
    must be rendered, not only those of the new wheels."""
    out = _published(tmp_path)
    make_wheel(tmp_path / "dist-cu", version="0.1.0+pt214cu130", cuda_tag="cu130", torch_major_minor="2.14",
               torch_requirement="torch<2.15,>=2.14")
    build_index(tmp_path / "dist-cu", out, audit=None)
    expected = {p for p in tree(out) if p.endswith(".html")}
    for page in expected:
        (out / page).unlink()
    make_wheel(tmp_path / "dist2", version="0.2.0+pt213cpu")
    build_index(tmp_path / "dist2", out, audit=None, render_all=True)
    assert expected <= {p for p in tree(out) if p.endswith(".html")}


def test_the_landing_page_and_the_result_say_where_the_site_is(tmp_path: Path) -> None:
    from kiln_tool.index.combos import TorchCatalog

    out = tmp_path / "site"
    make_wheel(tmp_path / "dist")
    make_wheel(tmp_path / "dist", version="0.2.0+pt213cpu")
    result = build_index(tmp_path / "dist", out, BASE, audit=None)
    assert (result.out, result.total, len(result.added)) == (out.resolve(), 2, 2)
    page = (out / "index.html").read_text()
    assert f"pip install opkiln -f {BASE}cpu/torch2.13/" in page  # the absolute URL users copy
    assert json.dumps(TorchCatalog.from_matrix().torch_index) in page  # where the chooser sends torch installs


def test_every_bad_wheel_is_listed_whatever_comes_between(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    make_wheel(dist, version="0.1.0+pt213cpu", metadata=False)
    make_wheel(dist, version="0.2.0+pt213cpu")  # good, but the run is refused already: not written
    make_wheel(dist, version="0.3.0+pt213cpu", metadata=False)
    with pytest.raises(IndexInputError) as caught:
        build_index(dist, tmp_path / "site", audit=None)
    lines = str(caught.value).splitlines()
    assert lines[0].startswith("2 unusable file(s) in ")
    assert "0.1.0" in lines[1] and "0.3.0" in lines[2], lines
    assert not (tmp_path / "site").exists()
