"""The release manifest's format, over generated manifests (hypothesis): what kiln writes reads back exactly;
a truncated, reordered or altered manifest is refused by the reader or by its signature, never accepted."""

from __future__ import annotations

import hashlib
import json
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiln_tool.guard.signed import (
    FileEntry,
    VerifyError,
    canonical,
    dir_fetcher,
    parse_release,
    read_chain,
    release_document,
    release_name,
    verify_ssh,
)
from signing.signed_sites import Keys

_SEGMENT = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789._+-", min_size=1, max_size=12).filter(
    lambda s: s not in (".", ".."))
_PATH = st.lists(_SEGMENT, min_size=1, max_size=3).map("/".join)
_SHA = st.binary(min_size=8, max_size=8).map(lambda b: hashlib.sha256(b).hexdigest())
_ENTRY = st.builds(lambda path, kind, sha, size: FileEntry(path, kind, sha, size),
                   _PATH, st.sampled_from(["page", "manifest", "metadata", "sdist"]), _SHA,
                   st.integers(min_value=0, max_value=2**40))
_ENTRIES = st.lists(_ENTRY, min_size=1, max_size=12, unique_by=lambda e: e.path)
_RELEASE = st.tuples(st.integers(min_value=1, max_value=999), _SHA, _ENTRIES)
_FAST = settings(max_examples=40, deadline=None)


def _document(sequence: int, previous: str, entries: list[FileEntry]) -> bytes:
    return release_document("opkiln", sequence, previous if sequence > 1 else None, entries)


@_FAST
@given(_RELEASE)
def test_what_is_written_reads_back_exactly(release: tuple[int, str, list[FileEntry]]) -> None:
    sequence, previous, entries = release
    raw = _document(sequence, previous, entries)
    read = parse_release(raw, "r")
    assert read.sequence == sequence and read.project == "opkiln"
    assert read.previous == (previous if sequence > 1 else None)
    assert list(read.files.values()) == sorted(entries, key=lambda e: e.path)
    assert read.raw == raw


@_FAST
@given(_RELEASE, st.data())
def test_a_truncated_manifest_is_refused(release: tuple[int, str, list[FileEntry]], data: st.DataObject) -> None:
    raw = _document(*release)
    cut = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
    with pytest.raises(VerifyError):
        parse_release(raw[:cut], "r")


@_FAST
@given(_RELEASE, st.data())
def test_a_reordered_manifest_is_refused(release: tuple[int, str, list[FileEntry]], data: st.DataObject) -> None:
    sequence, previous, entries = release
    if len(entries) < 2:
        return
    doc = json.loads(_document(sequence, previous, entries))
    order = data.draw(st.permutations(range(len(entries))))
    if list(order) == sorted(order):
        return
    doc["files"] = [doc["files"][i] for i in order]
    with pytest.raises(VerifyError, match="files out of order"):
        parse_release(canonical(doc), "r")
    with pytest.raises(VerifyError, match="not in canonical form"):  # same content, keys not in canonical order
        parse_release(json.dumps(json.loads(_document(sequence, previous, entries)), indent=1).encode(), "r")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_RELEASE, st.data())
def test_any_changed_byte_is_refused_by_the_reader_or_the_signature(keys: Keys, release: tuple[int, str,
                                                                     list[FileEntry]], data: st.DataObject) -> None:
    raw = _document(*release)
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp, "r.json")
        target.write_bytes(raw)
        subprocess.run(["ssh-keygen", "-Y", "sign", "-q", "-f", str(keys.release), "-n", "kiln-release", str(target)],
                       check=True, timeout=60)
        signature = Path(tmp, "r.json.sig").read_bytes()
    assert verify_ssh(raw, signature, keys.identity, "r").startswith("releases@")
    at = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
    flipped = raw[:at] + bytes([raw[at] ^ data.draw(st.integers(min_value=1, max_value=255))]) + raw[at + 1:]
    with pytest.raises(VerifyError):
        parse_release(flipped, "r")
        verify_ssh(flipped, signature, keys.identity, "r")


def test_release_one_names_no_predecessor_and_later_ones_do() -> None:
    entry = FileEntry("index.html", "page", "0" * 64, 1)
    with pytest.raises(VerifyError, match="release 2 names no release before it"):
        release_document("opkiln", 2, None, [entry])
    with pytest.raises(VerifyError, match="release 1 names a release before it"):
        release_document("opkiln", 1, "0" * 64, [entry])


@pytest.mark.parametrize("path", ["../etc/passwd", "a/../../b", "/abs", "a//b", "a b", ""])
def test_a_path_outside_the_index_is_refused(path: str) -> None:
    doc = {"schema": 1, "kind": "kiln-release", "project": "opkiln", "sequence": 1, "previous": None,
           "files": [{"path": path, "kind": "page", "sha256": "0" * 64, "size": 1}]}
    with pytest.raises(VerifyError, match="malformed path"):
        parse_release(canonical(doc), "r")


def test_a_chain_walk_checks_every_link(tmp_path: Path) -> None:
    """Without an identity (a release extending the chain): the hashes and sequence numbers alone."""
    entry = FileEntry("index.html", "page", "0" * 64, 1)
    one = release_document("opkiln", 1, None, [entry])
    two = release_document("opkiln", 2, hashlib.sha256(one).hexdigest(), [entry])
    (tmp_path / "releases").mkdir()
    (tmp_path / release_name(1)).write_bytes(one)
    (tmp_path / release_name(2)).write_bytes(two)
    (tmp_path / "kiln-release.json").write_bytes(two)
    chain = read_chain(dir_fetcher(tmp_path), None, "opkiln")
    assert chain is not None and [r.sequence for r in chain.releases] == [2, 1]
    with pytest.raises(VerifyError, match="a release of opkiln, not of other"):
        read_chain(dir_fetcher(tmp_path), None, "other")
    (tmp_path / release_name(1)).write_bytes(release_document("opkiln", 1, None, [FileEntry("x", "page", "1" * 64, 2)]))
    with pytest.raises(VerifyError, match="its chain skips or replaces release 1"):
        read_chain(dir_fetcher(tmp_path), None, "opkiln")
    (tmp_path / "kiln-release.json").write_bytes(one)
    with pytest.raises(VerifyError, match="not the bytes of"):
        read_chain(dir_fetcher(tmp_path), None, "opkiln")


_MEMBER = st.lists(st.text(alphabet="abcdefghij_", min_size=1, max_size=6), min_size=1, max_size=3).map(
    lambda parts: "opkiln/" + "/".join(parts) + ".py")


@settings(max_examples=12, deadline=None)
@given(st.dictionaries(_MEMBER, st.binary(max_size=64), max_size=5), st.booleans())
def test_what_a_wheel_installs_has_the_wheels_content_digest(members: dict[str, bytes], change: bool) -> None:
    """The digest kiln signs for a wheel (wheel_content_digest) is what doctor --verify computes from the files
    an installer wrote (installed_content, here after uv's install with its own INSTALLER, REQUESTED, RECORD):
    equal for an untouched install, different, with the file named, once a byte changes."""
    import shutil as _shutil
    import sys

    from index.synthetic_wheels import make_wheel
    from kiln_tool.guard.signed import installed_content, wheel_content_digest

    uv = Path(sys.executable).parent / "uv"
    with tempfile.TemporaryDirectory() as tmp:
        wheel = make_wheel(Path(tmp, "dist"), extra_files=members)
        target = Path(tmp, "site")
        done = subprocess.run([str(uv), "pip", "install", "--quiet", "--no-deps", "--no-cache", "--offline",
                               "--python", sys.executable, "--target", str(target), str(wheel)],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        installed = installed_content("opkiln", [str(target)])
        assert installed.changed == ()
        assert installed.content == wheel_content_digest(wheel)
        if change:
            victim = sorted(target.glob("opkiln/**/*.py"))[0]
            victim.write_bytes(victim.read_bytes() + b"#")
            again = installed_content("opkiln", [str(target)])
            assert again.content != wheel_content_digest(wheel)
            assert again.changed == (victim.relative_to(target).as_posix(),)
        _shutil.rmtree(target)
