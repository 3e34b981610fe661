"""kiln-index.json is untrusted input: a hand-edited field is refused (exit 2, one line, nothing
written), never a traceback, a write outside the site, or a wrong sha256 rendered into pages."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trust.kiln_runs import kiln, outside, tree

Doc = dict[str, Any]


def _entry(doc: Doc) -> Doc:
    entry: Doc = doc["wheels"][0]
    return entry


EDITS: dict[str, tuple[Callable[[Doc], object], str]] = {
    "project with a path": (lambda d: _entry(d).update(project="../../../evil"), "project"),
    "project not in normal form": (lambda d: _entry(d).update(project="OpKiln"), "project"),
    "project of another wheel": (lambda d: _entry(d).update(project="other"), "not the file name's"),
    "version as a number": (lambda d: _entry(d).update(version=1.0), "version"),
    "version not in normal form": (lambda d: _entry(d).update(version="0.1.0.0+pt213cpu"), "version"),
    "platform with a path": (lambda d: _entry(d).update(platforms=["../../x"]), "platforms"),
    "platform of another wheel": (lambda d: _entry(d).update(platforms=["win_amd64"]), "platforms"),
    "cuda tag with a path": (lambda d: _entry(d).update(cuda_tag="../../etc"), "cuda_tag"),
    "combination with a path": (lambda d: _entry(d).update(combos=[{"torch": "2.13", "cuda": "../x"}]), "combos"),
    "base URL with markup": (lambda d: d.update(base_url='https://x.org/"><script>/'), "base_url"),
    "base URL not http": (lambda d: d.update(base_url="javascript:alert(1)//"), "base_url"),
    "size as a string": (lambda d: _entry(d).update(size="12"), "size"),
    "sha256 not hex": (lambda d: _entry(d).update(sha256="Z" * 64), "sha256"),
    "filename with a path": (lambda d: _entry(d).update(filename="../../evil.whl"), "filename"),
    "requires_python not a specifier": (lambda d: _entry(d).update(requires_python=">=3.1O"), "Requires-Python"),
    "an unknown field": (lambda d: _entry(d).update(extra="x"), "extra"),
    "wheels not a list": (lambda d: d.update(wheels={"a": 1}), "wheels"),
    "an entry not an object": (lambda d: d["wheels"].append("x"), "wheels"),
    "entry listed twice under two names": (
        lambda d: d["wheels"].append({**_entry(d), "filename": "opkiln-0.1.0.0+pt213cpu-cp311-cp311-linux_x86_64.whl",
                                      "version": "0.1.0.0+pt213cpu"}), "name one distribution"),
}


@pytest.mark.parametrize("case", sorted(EDITS))
def test_a_hand_edited_manifest_is_refused(case: str, site: Path, tmp_path: Path) -> None:
    edit, word = EDITS[case]
    path = site / "kiln-index.json"
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))
    before, around = tree(site), outside(tmp_path, site)

    run = kiln("index", tmp_path / "dist", site)

    assert run.code == 2, run.stdout + run.stderr
    reason = run.stderr.splitlines()[0]
    assert "kiln-index.json" in reason and word in reason, reason
    assert "Traceback" not in run.stderr
    assert tree(site) == before
    assert outside(tmp_path, site) == around


def test_a_wrong_sha256_in_the_manifest_is_never_rendered(site: Path, tmp_path: Path) -> None:
    path = site / "kiln-index.json"
    doc = json.loads(path.read_text())
    _entry(doc)["sha256"] = "0" * 64
    path.write_text(json.dumps(doc))
    before = tree(site)
    run = kiln("index", tmp_path / "dist", site)
    assert run.code == 1, run.stderr
    assert doc["wheels"][0]["filename"] in run.stderr
    assert tree(site) == before


def test_a_symlink_inside_the_site_cannot_lead_writes_outside(site: Path, tmp_path: Path) -> None:
    """Every path is proven to resolve inside OUT before anything is written."""
    elsewhere = tmp_path / "elsewhere"
    (site / "simple" / "opkiln").rename(elsewhere)
    os.symlink(elsewhere, site / "simple" / "opkiln")
    before, around = tree(site), outside(tmp_path, site)
    run = kiln("index", tmp_path / "dist", site)
    assert run.code == 2, run.stderr
    assert "outside" in run.stderr
    assert tree(site) == before
    assert outside(tmp_path, site) == around
