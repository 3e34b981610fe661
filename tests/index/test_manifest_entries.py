"""kiln-index.json entry by entry (kiln_tool.index.manifest): a stable-ABI wheel listed under several
combinations reads back as written, each way an entry can disagree with its file name is refused, and a
merge adds the combinations a newer catalog gives a published stable wheel (the published entry otherwise
kept as it is)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from index.synthetic_wheels import make_wheel
from kiln_tool.index import build_index
from kiln_tool.index.combos import Combination, TorchCatalog
from kiln_tool.index.errors import IndexInputError
from kiln_tool.index.manifest import MANIFEST_NAME, PublishedWheel, load_manifest, parse_manifest

STABLE = "opkiln-0.1.0+cpu-cp310-abi3-linux_x86_64.whl"
TORCH = "opkiln-0.1.0+pt213cpu-cp311-cp311-linux_x86_64.whl"


def _catalog(*torches: str) -> TorchCatalog:
    return TorchCatalog(releases=tuple((t, frozenset({"cpu"})) for t in torches), pythons=("3.10", "3.11"),
                        torch_pythons=tuple((".".join(t.split(".")[:2]), ("3.10", "3.11")) for t in torches))


def _stable_wheel(dist: Path) -> Path:
    return make_wheel(dist, version="0.1.0+cpu", abi_mode="stable", python_tag="cp310", cuda_tag="cpu",
                      torch_major_minor="2.13", torch_requirement="torch>=2.13")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("manifest")
    _stable_wheel(root / "dist")
    make_wheel(root / "dist")
    out = root / "site"
    build_index(root / "dist", out, audit=None, catalog=_catalog("2.13.0", "2.14.1", "2.15.0"))
    return out


@pytest.fixture
def doc(site: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((site / MANIFEST_NAME).read_text())
    return loaded


def _entry(doc: dict[str, Any], filename: str) -> dict[str, Any]:
    (entry,) = [w for w in doc["wheels"] if w["filename"] == filename]
    return entry


def _parse(doc: dict[str, Any]) -> dict[str, PublishedWheel]:
    return parse_manifest(json.dumps(doc).encode(), "kiln-index.json").wheels


def test_an_entry_with_several_combinations_reads_back_as_written(site: Path, doc: dict[str, Any]) -> None:
    manifest = load_manifest(site)
    assert manifest is not None
    stable = manifest.wheels[STABLE]
    assert stable.combos == (Combination("2.15", "cpu"), Combination("2.14", "cpu"), Combination("2.13", "cpu"))
    assert manifest.wheels[TORCH].combos == (Combination("2.13", "cpu"),)
    assert stable.python_tag == "cp310-abi3" and stable.abi_mode == "stable" and stable.platforms == ("linux_x86_64",)
    assert [w.to_json() for w in manifest.wheels.values()] == doc["wheels"]
    assert manifest.to_json() == (site / MANIFEST_NAME).read_text()
    assert parse_manifest(manifest.to_json().encode(), "again").wheels == manifest.wheels


def test_combinations_are_read_in_one_order_without_repeats(doc: dict[str, Any]) -> None:
    entry = _entry(doc, STABLE)
    entry["combos"] = [entry["combos"][2], entry["combos"][0], entry["combos"][1], entry["combos"][2]]
    assert _parse(doc)[STABLE].combos == (Combination("2.15", "cpu"), Combination("2.14", "cpu"),
                                          Combination("2.13", "cpu"))


EDITS: dict[str, tuple[str, dict[str, Any], str]] = {
    "python tag of another wheel": (TORCH, {"python_tag": "cp312"}, "python_tag 'cp312' is not the file name's"),
    "python tag of a stable wheel": (STABLE, {"python_tag": "cp310"}, "python_tag 'cp310' is not the file name's"),
    "no torch requirement": (TORCH, {"torch_requirement": None}, "no torch_requirement"),
    "own combination missing": (STABLE, {"combos": [{"torch": "2.14", "cuda": "cpu"}]}, "combos"),
    "a combination of another CUDA": (STABLE, {"combos": [{"torch": "2.13", "cuda": "cpu"},
                                                          {"torch": "2.14", "cuda": "cu130"}]}, "combos"),
    "a per-torch wheel under two": (TORCH, {"combos": [{"torch": "2.13", "cuda": "cpu"},
                                                       {"torch": "2.14", "cuda": "cpu"}]}, "combos"),
    "version of another wheel": (TORCH, {"version": "0.2.0+pt213cpu"}, "version '0.2.0+pt213cpu' is not"),
    "project of another wheel": (TORCH, {"project": "other"}, "project 'other' is not the file name's"),
    "platforms of another wheel": (TORCH, {"platforms": ["manylinux_2_28_x86_64"]}, "platforms"),
    "torch requirement not a specifier": (TORCH, {"torch_requirement": "torch>=2.x"}, "malformed entry"),
    "requires-python not a specifier": (TORCH, {"requires_python": ">=3.1O"}, "Requires-Python"),
}


@pytest.mark.parametrize("case", sorted(EDITS))
def test_an_entry_that_disagrees_with_its_file_name_is_refused(doc: dict[str, Any], case: str) -> None:
    filename, change, reason = EDITS[case]
    _entry(doc, filename).update(change)
    with pytest.raises(IndexInputError, match="malformed entry") as caught:
        _parse(doc)
    assert reason in str(caught.value)
    assert filename in str(caught.value)


def test_an_entry_may_state_no_requires_python(doc: dict[str, Any]) -> None:
    _entry(doc, TORCH)["requires_python"] = None
    assert _parse(doc)[TORCH].requires_python is None


def test_platforms_are_compared_in_any_order(doc: dict[str, Any]) -> None:
    name = "opkiln-0.1.0+pt213cpu-cp311-cp311-linux_x86_64.manylinux_2_28_x86_64.whl"
    entry = copy.deepcopy(_entry(doc, TORCH))
    doc["wheels"] = [{**entry, "filename": name, "platforms": ["manylinux_2_28_x86_64", "linux_x86_64"]}]
    assert _parse(doc)[name].platforms == ("linux_x86_64", "manylinux_2_28_x86_64")


def test_with_combos_keeps_the_entry_when_nothing_is_new(site: Path) -> None:
    manifest = load_manifest(site)
    assert manifest is not None
    stable = manifest.wheels[STABLE]
    assert stable.with_combos(frozenset({Combination("2.13", "cpu")})) is stable
    assert stable.with_combos(frozenset(stable.combos)) is stable
    merged = stable.with_combos(frozenset({Combination("2.16", "cpu"), Combination("2.13", "cpu")}))
    assert merged.combos == (Combination("2.16", "cpu"), *stable.combos)
    assert merged.sha256 == stable.sha256 and merged.filename == stable.filename


def test_a_newer_catalog_adds_combinations_to_a_published_stable_wheel(tmp_path: Path) -> None:
    """Published when the catalog knew torch 2.13 only; merged again once it knows 2.14: the stable wheel is
    listed for 2.14 too (its bytes and name unchanged), the per-torch wheel stays under 2.13 alone."""
    _stable_wheel(tmp_path / "dist")
    make_wheel(tmp_path / "dist")
    out = tmp_path / "site"
    build_index(tmp_path / "dist", out, audit=None, catalog=_catalog("2.13.0"))
    first = json.loads((out / MANIFEST_NAME).read_text())
    assert _entry(first, STABLE)["combos"] == [{"cuda": "cpu", "torch": "2.13"}]

    make_wheel(tmp_path / "dist2", version="0.2.0+pt213cpu")
    result = build_index(tmp_path / "dist2", out, audit=None, catalog=_catalog("2.13.0", "2.14.1"))

    second = json.loads((out / MANIFEST_NAME).read_text())
    assert _entry(second, STABLE)["combos"] == [{"cuda": "cpu", "torch": "2.14"}, {"cuda": "cpu", "torch": "2.13"}]
    assert _entry(second, STABLE)["sha256"] == _entry(first, STABLE)["sha256"]
    assert _entry(second, TORCH)["combos"] == [{"cuda": "cpu", "torch": "2.13"}]
    assert [w.filename for w in result.added] == ["opkiln-0.2.0+pt213cpu-cp311-cp311-linux_x86_64.whl"]
    assert STABLE in (out / "cpu" / "torch2.14" / "index.html").read_text()
    assert TORCH not in (out / "cpu" / "torch2.14" / "index.html").read_text()
