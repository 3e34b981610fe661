"""The source fallback on the index (issue 42, item 2): `kiln index --sdist` publishes the project's sdist beside
its wheels, in the site folder's sdist/ or the wheels' storage, listed on source/index.html only (never on a wheel
page) and in kiln-index.json with sha256 and size; one per version, unlabelled, this project's, never replaced.

Synthetic wheels and stand-in sdists (index/sdist_files.py), `kiln index` in this process, no audit where the
wheels are synthetic: the publishing rules, in about 2 s. The release path with a real wheel, pip building from
the served source page and `kiln verify --all` over it is test_sdist_release.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from index.helpers import kiln_index_in_process, tree
from index.sdist_files import make_sdist
from index.synthetic_wheels import make_wheel
from index.test_storage_publish import BASE, MemoryStorage
from kiln_tool.index import IndexConflictError, IndexInputError, build_index
from kiln_tool.index.manifest import MANIFEST_NAME, load_manifest
from kiln_tool.index.sdists import check_sdist_name


def _dist(tmp_path: Path, version: str = "0.1.0+pt213cpu") -> Path:
    dist = tmp_path / f"dist-{version}"
    make_wheel(dist, version=version)
    return dist


def _links(page: Path) -> list[str]:
    return [line for line in page.read_text().splitlines() if "<a href" in line]


def test_the_sdist_is_published_beside_the_wheels_on_the_source_page_only(tmp_path: Path) -> None:
    sdist = make_sdist(tmp_path / "sdists")
    out = tmp_path / "site"
    result = build_index(_dist(tmp_path), out, audit=None, sdists=[sdist])
    assert [s.filename for s in result.added_sdists] == ["opkiln-0.1.0.tar.gz"]
    assert (out / "sdist" / sdist.name).read_bytes() == sdist.read_bytes()
    (entry,) = json.loads((out / MANIFEST_NAME).read_text())["sdists"]
    import hashlib
    assert entry == {"filename": sdist.name, "project": "opkiln", "version": "0.1.0",
                     "sha256": hashlib.sha256(sdist.read_bytes()).hexdigest(), "size": sdist.stat().st_size}
    (link,) = _links(out / "source" / "index.html")
    assert f'href="../sdist/{sdist.name}#sha256={entry["sha256"]}"' in link
    assert "<code>pip install opkiln --no-binary opkiln --no-build-isolation -f source/</code>" in \
        (out / "index.html").read_text()
    wheel_pages = [p for p in out.rglob("*.html") if p.parent.name != "source"]
    assert wheel_pages and not any(".tar.gz" in p.read_text() for p in wheel_pages), \
        "a wheel page lists the sdist: pip would build from source where no wheel fits"

    # Merged again with the same bytes: nothing changes; the next version's sdist joins the source page.
    before = tree(out)
    again = build_index(_dist(tmp_path), out, audit=None, sdists=[sdist])
    assert again.added_sdists == [] and sdist.name in again.unchanged and tree(out) == before
    newer = make_sdist(tmp_path / "sdists", version="0.2.0")
    build_index(_dist(tmp_path, "0.2.0+pt213cpu"), out, audit=None, sdists=[newer])
    assert [line.split(">")[1].split("<")[0] for line in _links(out / "source" / "index.html")] == \
        ["opkiln-0.1.0.tar.gz", "opkiln-0.2.0.tar.gz"]
    manifest = load_manifest(out)
    assert manifest is not None and sorted(manifest.sdists) == ["opkiln-0.1.0.tar.gz", "opkiln-0.2.0.tar.gz"]


def test_a_site_without_sdists_has_no_source_page_and_says_nothing_of_one(tmp_path: Path) -> None:
    out = tmp_path / "site"
    build_index(_dist(tmp_path), out, audit=None)
    assert not (out / "source").exists() and "--no-binary" not in (out / "index.html").read_text()
    assert "sdists" not in json.loads((out / MANIFEST_NAME).read_text())


def _pinned(d: Path) -> Path:
    return make_sdist(d, torch="torch<2.14,>=2.13")


def _huge(d: Path) -> Path:
    """A member whose header claims 8 GiB, its bytes never written: refused from the header, nothing unpacked."""
    import gzip
    import tarfile

    d.mkdir(parents=True, exist_ok=True)
    info = tarfile.TarInfo("opkiln-0.1.0/huge.bin")
    info.size = 8 << 30
    path = d / "opkiln-0.1.0.tar.gz"
    path.write_bytes(gzip.compress(info.tobuf(format=tarfile.PAX_FORMAT)))
    return path


BAD: dict[str, tuple[object, str]] = {
    "a local label": (lambda d: make_sdist(d, version="0.1.0+pt213cpu"), "carries a local label"),
    "another project": (lambda d: make_sdist(d, name="ringops"), "not of 'opkiln'"),
    "PKG-INFO of another version": (lambda d: make_sdist(d, meta_version="0.1.1"), "is not the file name's"),
    "PKG-INFO of another project": (lambda d: make_sdist(d, meta_name="ringops"), "not 'opkiln'"),
    "torch pinned to one build": (_pinned, "pinned to one torch"),
    "a member outside its folder": (lambda d: make_sdist(d, extra={"elsewhere/x.py": b""}), "lies outside"),
    "a link": (lambda d: make_sdist(d, links={"opkiln-0.1.0/x": "/etc/passwd"}), "not a file or a folder"),
    "not a tar.gz": (lambda d: (d.mkdir(parents=True), (d / "opkiln-0.1.0.tar.gz").write_bytes(b"PK\x03\x04"))[1] and
                     d / "opkiln-0.1.0.tar.gz", "not a readable .tar.gz"),
    "a name kiln sdist never writes": (lambda d: make_sdist(d, filename="OpKiln-0.1.0.tar.gz"), "PEP 625"),
    "a zip": (lambda d: make_sdist(d, filename="opkiln-0.1.0.zip"), "not an sdist name"),
    "members past the unpacked limit": (_huge, "add up to more than"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_sdist_is_one_line_exit_2_and_nothing_written(case: str, tmp_path: Path) -> None:
    make, expected = BAD[case]
    sdist = make(tmp_path / "sdists")  # type: ignore[operator]
    out = tmp_path / "site"
    run = kiln_index_in_process(_dist(tmp_path), out, "--sdist", sdist)
    assert run.returncode == 2, run.stdout + run.stderr
    first = run.stderr.splitlines()[0]
    assert first.startswith("kiln index: unusable sdist: ") and expected in first, run.stderr
    assert run.stderr.splitlines()[1:] == ["kiln index: nothing written"], run.stderr
    assert not out.exists()


def test_one_sdist_per_version_and_never_other_bytes(tmp_path: Path) -> None:
    out = tmp_path / "site"
    sdist = make_sdist(tmp_path / "a")
    build_index(_dist(tmp_path), out, audit=None, sdists=[sdist])
    before = tree(out)
    cases = [
        (make_sdist(tmp_path / "b", note="other bytes"), IndexConflictError, "published with sha256"),
        (make_sdist(tmp_path / "c", version="0.1.0.0"), IndexConflictError, "already has its sdist, opkiln-0.1.0"),
    ]
    for other, error, text in cases:
        with pytest.raises(error, match=text):
            build_index(_dist(tmp_path), out, audit=None, sdists=[other])
        assert tree(out) == before
    # Two of one version in one run: unusable input, whatever is published.
    with pytest.raises(IndexInputError, match="two sdists of version"):
        build_index(_dist(tmp_path, "0.3.0+pt213cpu"), tmp_path / "new",
                    audit=None, sdists=[make_sdist(tmp_path / "d", version="0.3.0"),
                                        make_sdist(tmp_path / "e", version="0.3")])
    assert not (tmp_path / "new").exists()


def test_a_published_sdist_altered_on_disk_stops_the_next_merge(tmp_path: Path) -> None:
    out = tmp_path / "site"
    sdist = make_sdist(tmp_path / "a")
    build_index(_dist(tmp_path), out, audit=None, sdists=[sdist])
    shutil.copy(make_sdist(tmp_path / "b", note="swapped"), out / "sdist" / sdist.name)
    before = tree(out)
    with pytest.raises(Exception, match=r"sdist/opkiln-0\.1\.0\.tar\.gz"):
        build_index(_dist(tmp_path, "0.2.0+pt213cpu"), out, audit=None)
    assert tree(out) == before


def test_a_manifest_with_two_sdists_of_one_version_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "site"
    build_index(_dist(tmp_path), out, audit=None, sdists=[make_sdist(tmp_path / "a")])
    doc = json.loads((out / MANIFEST_NAME).read_text())
    twin = dict(doc["sdists"][0], filename="opkiln-0.1.0.0.tar.gz", version="0.1.0.0")
    doc["sdists"].append(twin)
    (out / MANIFEST_NAME).write_text(json.dumps(doc))
    with pytest.raises(IndexInputError, match="two sdists of version"):
        load_manifest(out)


def test_a_storage_holds_the_sdist_and_the_page_links_its_url(tmp_path: Path) -> None:
    storage = MemoryStorage()
    sdist = make_sdist(tmp_path / "a")
    out = tmp_path / "site"
    build_index(_dist(tmp_path), out, audit=None, storage=storage, sdists=[sdist])  # type: ignore[arg-type]
    assert storage.objects[sdist.name] == sdist.read_bytes()
    assert not (out / "sdist").exists()
    (link,) = _links(out / "source" / "index.html")
    assert f'href="{BASE}{sdist.name}#sha256=' in link
    (entry,) = json.loads((out / MANIFEST_NAME).read_text())["sdists"]
    assert entry["url"] == BASE + sdist.name and entry["stored_at"] == storage.place
    # Append-only like a wheel: other bytes under the stored name are refused before anything is written.
    storage.objects.clear()
    storage.objects[sdist.name] = b"other bytes"
    with pytest.raises(Exception, match="other bytes"):
        build_index(_dist(tmp_path), tmp_path / "again", audit=None, storage=storage,  # type: ignore[arg-type]
                    sdists=[sdist])
    assert not (tmp_path / "again").exists()


_VERSIONS = st.one_of(
    st.from_regex(r"[0-9]{1,3}(\.[0-9]{1,3}){0,3}((a|b|rc)[0-9])?(\.post[0-9])?(\.dev[0-9])?", fullmatch=True),
    st.text(alphabet="0123456789.+abcdefghijklmnopqrstuvwxyz_-!", min_size=1, max_size=20),
)


@settings(max_examples=150, deadline=None)
@given(name=st.sampled_from(["opkiln", "OpKiln", "op-kiln", "op_kiln", "ringops"]), version=_VERSIONS)
def test_sdist_names_accepted_are_exactly_kiln_sdists_own(name: str, version: str) -> None:
    """Every name is either refused with IndexInputError or is the PEP 625 name of an unlabelled opkiln version."""
    from packaging.version import InvalidVersion, Version

    filename = f"{name}-{version}.tar.gz"
    try:
        project, got = check_sdist_name(filename, "opkiln")
    except IndexInputError:
        try:
            parsed = Version(version)
        except InvalidVersion:
            return
        assert name != "opkiln" or parsed.local is not None or str(parsed) != version
        return
    assert project == "opkiln" and name == "opkiln"
    assert Version(got).local is None and str(Version(got)) == got == version
