"""The sdist in the wheels' storage, against the real servers of test_storage.py (the stand-in gh's release assets
and moto's S3 on 127.0.0.2): uploaded beside the wheels, read back by the storage's digest, then listed by its
absolute URL on source/index.html; never over a name the storage holds with other bytes; checked against the
storage's listing by later runs, which refuse to merge once it is gone. One server per backend: 5 s with the
release assets, 22 s with S3 (moto starting) at load 10."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from index.sdist_files import make_sdist
from index.storage_servers import environment
from index.synthetic_wheels import make_wheel
from index.test_storage import BASE, Backend, _get, backend
from kiln_tool.index import KilnIndexError, build_index

__all__ = ["backend"]  # the parametrized fixture, shared with test_storage.py


def _index(dist: Path, out: Path, backend: Backend, sdists: list[Path]) -> object:
    storage = backend.storage()
    with environment(backend.env()):
        return build_index(dist, out, BASE, audit=None, storage=storage, sdists=sdists)


def test_the_sdist_is_stored_read_back_linked_and_never_replaced(backend: Backend, tmp_path: Path) -> None:
    make_wheel(tmp_path / "dist")
    sdist = make_sdist(tmp_path / "sdist")
    out = tmp_path / "site"
    _index(tmp_path / "dist", out, backend, [sdist])
    assert sdist.name in backend.names() and not (out / "sdist").exists()
    (entry,) = json.loads((out / "kiln-index.json").read_text())["sdists"]
    assert entry["url"].startswith(backend.wheel_host) and entry["stored_at"].startswith(backend.name.split("-")[0])
    served = _get(entry["url"])
    assert served == sdist.read_bytes() and hashlib.sha256(served).hexdigest() == entry["sha256"]
    assert f'href="{entry["url"]}#sha256={entry["sha256"]}"' in (out / "source" / "index.html").read_text()
    before = (out / "kiln-index.json").read_bytes()

    # The next version's sdist name already held with other bytes: refused before anything is uploaded.
    newer = make_wheel(tmp_path / "dist2", version="0.2.0+pt213cpu")
    backend.place("opkiln-0.2.0.tar.gz", b"an intruder's bytes")
    with pytest.raises(KilnIndexError, match="other bytes"):
        _index(tmp_path / "dist2", out, backend, [make_sdist(tmp_path / "sdist2", version="0.2.0")])
    assert newer.name not in backend.names(), "the wheel was uploaded before the sdist's clash was seen"
    assert (out / "kiln-index.json").read_bytes() == before

    # The published sdist gone from the storage behind kiln's back: the next merge refuses, the site as it was.
    backend.remove(sdist.name)
    with pytest.raises(KilnIndexError, match=sdist.name.replace(".", r"\.")):
        _index(tmp_path / "dist", out, backend, [])
    assert (out / "kiln-index.json").read_bytes() == before
