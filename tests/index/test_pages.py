"""What the pages say: which wheel is listed where (from build info and METADATA, the torch list from
data/matrix.json), PEP 503/658/714 attributes, normalized names, escaping."""

from __future__ import annotations

import hashlib
import json
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin

import pytest

from index.synthetic_wheels import make_wheel
from kiln_tool.index import build_index

REPO = Path(__file__).resolve().parents[2]


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.links.append(dict(attrs))


def links(page: Path) -> list[dict[str, str | None]]:
    parser = _Links()
    parser.feed(page.read_text())
    return parser.links


def wheel_links(site: Path, page: str) -> dict[str, dict[str, str | None]]:
    """File name -> attributes of every wheel link on a page, each href checked to resolve to the wheel."""
    found = {}
    for attrs in links(site / page):
        href = attrs["href"] or ""
        if ".whl" not in href:
            continue
        url, _, fragment = urljoin(f"http://h/{page}", href).partition("#")
        target = site / unquote(url.removeprefix("http://h/"))
        assert target.is_file(), f"{page}: {href} resolves to nothing"
        assert fragment == "sha256=" + hashlib.sha256(target.read_bytes()).hexdigest()
        found[target.name] = attrs
    return found


def _matrix_minors_with(cuda: str, floor: tuple[int, int]) -> set[str]:
    """Read straight from data/matrix.json: torch minors >= floor that ship the CUDA variant."""
    matrix = json.loads((REPO / "src" / "kiln_tool" / "data" / "matrix.json").read_text())
    minors = set()
    for release in matrix["torch"]:
        major, minor = (int(p) for p in release["version"].split(".")[:2])
        if (major, minor) >= floor and cuda in release["variants"]:
            minors.add(f"{major}.{minor}")
    return minors


@pytest.fixture(scope="module")
def mixed_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Per-torch wheels for two combinations, a stable-ABI wheel, and a second project.

    Synthetic wheels have no compiled extension and claim builds that never ran, which the real audit
    rightly refuses (tests/index/test_merge.py shows it does); these tests are about the pages, so the
    site is built with the library call and no auditor.
    """
    root = tmp_path_factory.mktemp("mixed")
    dist = root / "dist"
    make_wheel(dist)  # cpu, torch 2.13, cp311
    make_wheel(dist, version="0.1.0+pt214cu130", cuda_tag="cu130", torch_major_minor="2.14",
               torch_requirement="torch<2.15,>=2.14", platform="manylinux_2_28_x86_64")
    make_wheel(dist, version="0.1.0+cu130", abi_mode="stable", python_tag="cp310", cuda_tag="cu130",
               torch_major_minor="2.13", torch_requirement="torch>=2.13", platform="manylinux_2_28_x86_64",
               requires_python=">=3.10,<4")
    build_index(dist, root / "site", "https://wheels.example.org/x", audit=None)
    return root / "site"


def test_per_torch_wheels_are_listed_under_their_own_combination_only(mixed_site: Path) -> None:
    cpu = wheel_links(mixed_site, "cpu/torch2.13/index.html")
    assert "opkiln-0.1.0+pt213cpu-cp311-cp311-linux_x86_64.whl" in cpu
    assert not any("cu130" in name for name in cpu)
    cu = wheel_links(mixed_site, "cu130/torch2.14/index.html")
    assert "opkiln-0.1.0+pt214cu130-cp311-cp311-manylinux_2_28_x86_64.whl" in cu
    assert not any("pt213" in name for name in cu)
    flat = wheel_links(mixed_site, "torch-2.14.0+cu130.html")
    assert set(flat) == set(cu)


def test_a_stable_abi_wheel_is_listed_for_every_torch_its_requirement_admits(mixed_site: Path) -> None:
    stable = "opkiln-0.1.0+cu130-cp310-abi3-manylinux_2_28_x86_64.whl"
    expected = _matrix_minors_with("cu130", (2, 13))
    assert expected >= {"2.13", "2.14"}
    listed = {p.parent.name.removeprefix("torch") for p in mixed_site.glob("cu130/torch*/index.html")
              if stable in wheel_links(mixed_site, p.relative_to(mixed_site).as_posix())}
    assert listed == expected
    for minor in expected:
        assert stable in wheel_links(mixed_site, f"torch-{minor}.0+cu130.html")
    assert stable not in wheel_links(mixed_site, "cpu/torch2.13/index.html")
    manifest = json.loads((mixed_site / "kiln-index.json").read_text())
    (entry,) = [w for w in manifest["wheels"] if w["filename"] == stable]
    assert {c["torch"] for c in entry["combos"]} == expected


def test_simple_index_follows_pep_503_658_714(mixed_site: Path) -> None:
    root = links(mixed_site / "simple/index.html")
    assert [a["href"] for a in root] == ["opkiln/"]  # the site's one project, normalized
    html = (mixed_site / "simple/opkiln/index.html").read_text()
    assert '<meta name="pypi:repository-version" content="1.0">' in html
    found = wheel_links(mixed_site, "simple/opkiln/index.html")
    assert len(found) == 3
    for name, attrs in found.items():
        metadata = (mixed_site / "wheels" / f"{name}.metadata").read_bytes()
        digest = "sha256=" + hashlib.sha256(metadata).hexdigest()
        assert attrs["data-dist-info-metadata"] == digest
        assert attrs["data-core-metadata"] == digest
        assert metadata.startswith(b"Metadata-Version:")
        assert attrs["data-requires-python"] in (">=3.10", ">=3.10,<4")


def test_attributes_are_html_escaped(mixed_site: Path) -> None:
    html = (mixed_site / "simple/opkiln/index.html").read_text()
    assert 'data-requires-python="&gt;=3.10,&lt;4"' in html
    assert "<4" not in html
    assert "%2B" in html  # "+" of local versions percent-encoded in hrefs, for hosts that read "+" as space


def test_landing_page_without_javascript_lists_every_combination(mixed_site: Path) -> None:
    html = (mixed_site / "index.html").read_text()
    assert '<table id="coverage">' in html
    for page in ("cpu/torch2.13/index.html", "cu130/torch2.14/index.html"):
        assert f"pip install opkiln -f https://wheels.example.org/x/{page}" in html
        assert f'href="{page}"' in html
    # every link on the landing page resolves inside the site
    for attrs in links(mixed_site / "index.html"):
        href = unquote(attrs["href"] or "")
        if href.startswith("http"):
            continue
        target = mixed_site / href
        assert target.is_file() or (target / "index.html").is_file(), href
