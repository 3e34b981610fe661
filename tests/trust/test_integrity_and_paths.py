"""Published files are verified by sha256 on every merge; DIST and OUT may not overlap; a landing page's
embedded data cannot open markup."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from index.synthetic_wheels import make_wheel
from trust.kiln_runs import kiln, outside, tree

PUBLISHED = "opkiln-0.1.0+pt213cpu-cp311-cp311-linux_x86_64.whl"


def _flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("name", [PUBLISHED, f"{PUBLISHED}.metadata"])
def test_a_published_file_altered_with_the_same_size_is_refused(name: str, site: Path, tmp_path: Path) -> None:
    _flip_last_byte(site / "wheels" / name)
    before = tree(site)
    run = kiln("index", tmp_path / "dist", site)
    assert run.code == 1, run.stdout + run.stderr
    assert name in run.stderr and "differ" in run.stderr
    assert tree(site) == before


def test_trusting_sizes_does_not_see_a_same_size_alteration(site: Path, tmp_path: Path) -> None:
    """What --trust-published-sizes gives up (docs/security.md): this is the gap, shown."""
    _flip_last_byte(site / "wheels" / PUBLISHED)
    run = kiln("index", "--trust-published-sizes", tmp_path / "dist", site)
    assert run.code == 0, run.stderr
    truncated = site / "wheels" / PUBLISHED
    truncated.write_bytes(truncated.read_bytes()[:-1])
    assert kiln("index", "--trust-published-sizes", tmp_path / "dist", site).code == 1


def test_a_published_wheel_replaced_by_a_symlink_is_refused(site: Path, tmp_path: Path) -> None:
    wheel = site / "wheels" / PUBLISHED
    copy = tmp_path / "copy.whl"
    wheel.rename(copy)
    os.symlink(copy, wheel)
    run = kiln("index", tmp_path / "dist", site)
    assert run.code == 1, run.stderr
    assert "not a regular file" in run.stderr


def _layouts(tmp_path: Path) -> dict[str, tuple[Path, Path]]:
    dist = tmp_path / "dist"
    make_wheel(dist)
    (tmp_path / "site-with-dist").mkdir()
    make_wheel(tmp_path / "site-with-dist" / "dist")
    os.symlink(dist, tmp_path / "dist-link")
    return {
        "DIST inside OUT": (tmp_path / "site-with-dist" / "dist", tmp_path / "site-with-dist"),
        "OUT inside DIST": (dist, dist / "site"),
        "OUT deep inside DIST": (dist, dist / "a" / "b" / "site"),
        "DIST == OUT": (dist, dist),
        "OUT inside DIST through a symlink": (dist, tmp_path / "dist-link" / "site"),
        "DIST == OUT through a symlink": (tmp_path / "dist-link", dist),
    }


@pytest.mark.parametrize("case", ["DIST inside OUT", "OUT inside DIST", "OUT deep inside DIST", "DIST == OUT",
                                  "OUT inside DIST through a symlink", "DIST == OUT through a symlink"])
def test_overlapping_dist_and_out_are_refused_before_anything_is_created(case: str, tmp_path: Path) -> None:
    dist, out = _layouts(tmp_path)[case]
    before = tree(tmp_path)
    run = kiln("index", dist, out)
    assert run.code == 2, run.stdout + run.stderr
    assert re.search(r"must not lie inside|are one folder", run.stderr), run.stderr
    assert tree(tmp_path) == before


def test_landing_page_data_cannot_open_markup() -> None:
    from kiln_tool.index.render import Site, landing_page

    hostile = "</script><script>alert(1)</script><!--&\u2028\u2029>"
    page = landing_page(Site(project=hostile, base_url=None, combos={}, pythons=["3.11"], torch_pythons={},
                             torch_index=f"https://x.org/{hostile}/{{variant}}"))
    start = page.index('<script type="application/json" id="kiln-data">') + len(
        '<script type="application/json" id="kiln-data">')
    end = page.index("</script>", start)
    embedded = page[start:end]
    assert not re.search(r"[<>&\u2028\u2029]", embedded)
    data = json.loads(embedded)
    assert data["project"] == hostile and hostile in data["torch_index"]
    assert "<script>alert(1)" not in page


def test_a_site_refused_for_overlap_is_not_left_half_made(tmp_path: Path) -> None:
    """The old failure: OUT inside DIST was accepted once, then every later run broke."""
    dist = tmp_path / "dist"
    make_wheel(dist)
    wheels = tree(dist)
    assert kiln("index", dist, dist / "site").code == 2
    assert tree(dist) == wheels
    assert kiln("index", dist, tmp_path / "site").code == 0
    assert kiln("index", dist, tmp_path / "site").code == 0
    assert tree(dist) == wheels
    assert outside(tmp_path, tmp_path / "site") == {"dist": "dir", **{f"dist/{k}": v for k, v in wheels.items()}}
