"""A merge into an existing site writes O(new wheels) files: the new wheels, the pages that list them,
the landing page and the manifest; a merge cut short is finished by the next run."""

from __future__ import annotations

import os
from pathlib import Path

from index.synthetic_wheels import make_wheel
from trust.kiln_runs import kiln


def _stamps(root: Path) -> dict[str, tuple[int, int]]:
    found = {}
    for directory, _dirs, files in os.walk(root):
        for name in files:
            st = os.stat(os.path.join(directory, name))
            found[os.path.relpath(os.path.join(directory, name), root)] = (st.st_ino, st.st_mtime_ns)
    return found


def _site(tmp_path: Path) -> Path:
    from kiln_tool.index import build_index

    dist = tmp_path / "dist0"
    for i in range(8):
        for py in ("cp310", "cp311", "cp312"):
            make_wheel(dist, version=f"0.{i}.0+pt213cpu", python_tag=py)
        make_wheel(dist, version=f"0.{i}.0+pt214cu130", cuda_tag="cu130", torch_major_minor="2.14",
                   torch_requirement="torch<2.15,>=2.14", platform="manylinux_2_28_x86_64")
    out = tmp_path / "site"
    build_index(dist, out, audit=None)
    return out


def test_a_merge_writes_only_the_new_wheel_and_the_pages_listing_it(tmp_path: Path) -> None:
    out = _site(tmp_path)
    before = _stamps(out)
    make_wheel(tmp_path / "dist", version="0.9.0+pt213cpu")
    run = kiln("index", tmp_path / "dist", out)
    assert run.code == 0, run.stderr
    after = _stamps(out)
    written = sorted(rel for rel, stamp in after.items() if before.get(rel) != stamp)
    assert written == sorted([
        "wheels/opkiln-0.9.0+pt213cpu-cp311-cp311-linux_x86_64.whl",
        "wheels/opkiln-0.9.0+pt213cpu-cp311-cp311-linux_x86_64.whl.metadata",
        "cpu/torch2.13/index.html", "torch-2.13.0+cpu.html", "simple/opkiln/index.html", "index.html",
        "kiln-index.json",
    ])
    assert set(before) <= set(after)


def test_a_rerun_with_nothing_new_writes_nothing(tmp_path: Path) -> None:
    out = _site(tmp_path)
    before = _stamps(out)
    assert kiln("index", tmp_path / "dist0", out).code == 0
    assert _stamps(out) == before


def test_a_merge_cut_short_is_finished_by_the_next_run(tmp_path: Path) -> None:
    out = _site(tmp_path)
    full = {rel: (out / rel).read_bytes() for rel in _stamps(out)}
    # As a merge killed between its pages and its manifest leaves it: the marker, a page not yet updated.
    (out / ".kiln-merge-pending").write_text("cut short\n")
    (out / "cu130" / "torch2.14" / "index.html").write_text("<!DOCTYPE html>\n<html>stale</html>\n")
    assert kiln("index", tmp_path / "dist0", out).code == 0
    assert not (out / ".kiln-merge-pending").exists()
    assert {rel: (out / rel).read_bytes() for rel in _stamps(out)} == full


def test_a_page_turned_into_a_folder_is_refused_before_anything_moves(tmp_path: Path) -> None:
    from trust.kiln_runs import tree

    out = _site(tmp_path)
    (out / "index.html").unlink()
    (out / "index.html").mkdir()
    before = tree(out)
    make_wheel(tmp_path / "dist", version="0.9.0+pt213cpu")
    run = kiln("index", tmp_path / "dist", out)
    assert run.code == 2, run.stderr
    assert "is not a file" in run.stderr
    assert tree(out) == before
