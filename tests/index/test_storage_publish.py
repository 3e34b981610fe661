"""What `kiln index` does with a storage (index/publish.py _store, _check_stored), in this process against an
in-memory storage that keeps the Storage protocol (index/storage.py): new wheels (and their METADATA, where
the storage serves it) are uploaded before anything lists them, pages link them by absolute URL, the site
keeps no copy, an earlier run's upload of the same bytes is adopted, and later runs check what is listed by
the storage's own listing. The real backends (the stand-in gh's release assets, moto's S3) are
tests/index/test_storage.py's; this file pins down the publishing logic between them."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from index.synthetic_wheels import make_wheel
from kiln_tool.index import build_index
from kiln_tool.index.manifest import MANIFEST_NAME
from kiln_tool.index.storage import Stored

BASE = "https://wheels.example.org/v1/"
FIRST = "opkiln-0.1.0+pt213cpu-cp311-cp311-linux_x86_64.whl"
SECOND = "opkiln-0.2.0+pt213cpu-cp311-cp311-linux_x86_64.whl"


@dataclass
class MemoryStorage:
    """Objects in a dict; ``place`` is what ``where()`` and ``stored_at`` name; ``others`` are places whose
    listing is not this storage's to give (another release)."""

    serves_metadata: bool = True
    place: str = "github-release:opkiln/opkiln@v1"
    backend: str = "github-release"
    objects: dict[str, bytes] = field(default_factory=dict)
    puts: list[str] = field(default_factory=list)

    def where(self) -> str:
        return self.place

    def stored_at(self, name: str) -> str:
        # A release names the tag (each asset is there); a bucket names each object (index/storage.py).
        return self.place if self.backend == "github-release" else f"{self.place}{name}"

    def url(self, name: str) -> str:
        return BASE + name.replace("+", "%2B")

    def stat(self, name: str) -> Stored | None:
        data = self.objects.get(name)
        return None if data is None else Stored(name, len(data), hashlib.sha256(data).hexdigest())

    def read(self, name: str) -> bytes:
        return self.objects[name]

    def put(self, name: str, path: Path, sha256: str) -> None:
        assert name not in self.objects, "an object is never replaced"
        self.objects[name] = path.read_bytes()
        self.puts.append(name)

    def listing(self, stored_at: str) -> dict[str, Stored] | None:
        if not stored_at.startswith(self.place):
            return None
        return {name: found for name in self.objects if (found := self.stat(name)) is not None}


def _manifest(out: Path) -> dict[str, dict[str, object]]:
    return {w["filename"]: w for w in json.loads((out / MANIFEST_NAME).read_text())["wheels"]}


@pytest.mark.parametrize(("serves_metadata", "backend"), [(True, "github-release"), (False, "s3")])
def test_new_wheels_are_uploaded_then_listed_by_url_and_the_site_keeps_no_copy(tmp_path: Path, serves_metadata: bool,
                                                                             backend: str) -> None:
    wheel = make_wheel(tmp_path / "dist")
    place = "github-release:opkiln/opkiln@v1" if backend == "github-release" else "s3:bucket/wheels/"
    storage = MemoryStorage(serves_metadata=serves_metadata, backend=backend, place=place)
    said: list[str] = []
    out = tmp_path / "site"
    build_index(tmp_path / "dist", out, audit=None, storage=storage, log=said.append)

    expected = [f"{FIRST}.metadata", FIRST] if serves_metadata else [FIRST]
    assert storage.puts == expected
    assert storage.objects[FIRST] == wheel.read_bytes()
    entry = _manifest(out)[FIRST]
    assert (entry["url"], entry["stored_at"], entry["metadata_beside"]) == \
        (BASE + FIRST.replace("+", "%2B"), storage.place + ("" if backend == "github-release" else FIRST),
         serves_metadata)
    assert not (out / "wheels").exists()
    assert f'href="{BASE}{FIRST.replace("+", "%2B")}#sha256=' in (out / "cpu" / "torch2.13" / "index.html").read_text()
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert f"uploaded {FIRST} to {storage.place} (read back: sha256 {digest[:16]}...)" in said


def test_an_earlier_runs_upload_of_the_same_bytes_is_adopted(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "dist")
    storage = MemoryStorage(serves_metadata=False, objects={FIRST: wheel.read_bytes()})
    said: list[str] = []
    build_index(tmp_path / "dist", tmp_path / "site", audit=None, storage=storage, log=said.append)
    assert storage.puts == []
    assert f"adopted {FIRST}: {storage.place} already holds it with the same bytes (an earlier run's upload)" in said
    assert FIRST in _manifest(tmp_path / "site")


def test_later_runs_check_every_stored_wheel_by_the_storages_listing(tmp_path: Path) -> None:
    make_wheel(tmp_path / "dist")
    storage = MemoryStorage()
    out = tmp_path / "site"
    build_index(tmp_path / "dist", out, audit=None, storage=storage)

    make_wheel(tmp_path / "dist2", version="0.2.0+pt213cpu")
    said: list[str] = []
    build_index(tmp_path / "dist2", out, audit=None, storage=storage, log=said.append)
    assert f"checked 1 stored wheel(s) against the storage's own listing of {storage.place}" in said
    assert set(_manifest(out)) == {FIRST, SECOND}
    assert not (out / "wheels").exists()  # an existing site gains no folder for stored wheels

    other = MemoryStorage(place="github-release:opkiln/opkiln@v2", objects={})
    make_wheel(tmp_path / "dist3", version="0.3.0+pt213cpu")
    said.clear()
    build_index(tmp_path / "dist3", out, audit=None, storage=other, log=said.append)
    assert f"2 stored elsewhere than {other.place}, not checked here" in said

    make_wheel(tmp_path / "dist3b", version="0.3.1+pt213cpu")
    said.clear()
    build_index(tmp_path / "dist3b", out, audit=None, storage=storage, log=said.append)
    assert f"checked 2 stored wheel(s) against the storage's own listing of {storage.place}; 1 stored elsewhere " \
           f"than {storage.place}, not checked here" in said

    make_wheel(tmp_path / "dist4", version="0.4.0+pt213cpu")
    said.clear()
    build_index(tmp_path / "dist4", out, audit=None, log=said.append)  # no --storage: into the site folder
    assert "4 listed wheel(s) live in storage; not checked by a run without --storage" in said
    assert (out / "wheels" / "opkiln-0.4.0+pt213cpu-cp311-cp311-linux_x86_64.whl").is_file()
    assert "url" not in _manifest(out)["opkiln-0.4.0+pt213cpu-cp311-cp311-linux_x86_64.whl"]
