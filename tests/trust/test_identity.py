"""One identity: a published distribution is its normalized name, normalized version and tag set.
A wheel that names a published distribution another way is refused with other bytes (exit 1,
the site byte for byte as it was, both files named) and is no second copy with the same bytes."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from index.synthetic_wheels import make_wheel
from trust.kiln_runs import kiln, outside, tree

PUBLISHED = "opkiln-0.1.0+pt213cpu-cp311-cp311-linux_x86_64.whl"


@pytest.fixture
def site(tmp_path: Path) -> Path:
    out = tmp_path / "site"
    make_wheel(tmp_path / "dist0")
    run = kiln("index", tmp_path / "dist0", out)
    assert run.code == 0, run.stderr
    return out


EQUIVALENTS = {
    "project case": dict(name="OpKiln"),
    "trailing zero release": dict(version="0.1.0.0+pt213cpu"),
    "local version case": dict(version="0.1.0+PT213CPU"),
    "leading v and zeros": dict(version="v0.01.0+pt213cpu",
                                filename="opkiln-v0.01.0+pt213cpu-cp311-cp311-linux_x86_64.whl"),
    "build tag": dict(filename="opkiln-0.1.0+pt213cpu-1-cp311-cp311-linux_x86_64.whl"),
    "overlapping tag set": dict(filename="opkiln-0.1.0+pt213cpu-cp311-cp311-linux_x86_64.manylinux_2_28_x86_64.whl"),
}


@pytest.mark.parametrize("case", sorted(EQUIVALENTS))
def test_an_equivalent_name_with_other_bytes_is_refused(case: str, site: Path, tmp_path: Path) -> None:
    knobs: dict[str, str] = dict(EQUIVALENTS[case])
    dist = tmp_path / "dist"
    wheel = make_wheel(dist, **{"torch_requirement": "torch<2.14,>=2.13.1", **knobs})  # type: ignore[arg-type]
    before, around = tree(site), outside(tmp_path, site)

    run = kiln("index", dist, site)

    assert run.code == 1, run.stdout + run.stderr
    assert wheel.name in run.stderr and PUBLISHED in run.stderr
    assert "same distribution" in run.stderr
    assert tree(site) == before
    assert outside(tmp_path, site) == around


@pytest.mark.parametrize("name", ["Op_Kiln", "opkiln_", "torch", "opkiln.extra"])
def test_another_project_is_refused(site: Path, tmp_path: Path, name: str) -> None:
    """The site's project is opkiln: a wheel of another project (or a spelling that is another project,
    like a trailing separator) is refused with exit 2 naming the rule, the site unchanged."""
    before = tree(site)
    other = make_wheel(tmp_path / "dist", name=name, version="0.2.0+pt213cpu")
    run = kiln("index", other.parent, site)
    assert run.code == 2, run.stderr
    assert "not a kiln wheel: project" in run.stderr
    assert tree(site) == before


def test_the_same_bytes_under_an_equivalent_name_are_not_a_second_copy(site: Path, tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    dist.mkdir()
    shutil.copy2(site / "wheels" / PUBLISHED, dist / "opkiln-0.1.0.0+PT213CPU-cp311-cp311-linux_x86_64.whl")
    before = tree(site)

    run = kiln("index", dist, site)

    assert run.code == 0, run.stderr
    assert f"as {PUBLISHED}" in run.stdout
    assert tree(site) == before


def test_two_equivalent_wheels_in_one_dist_with_other_bytes_are_refused(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    make_wheel(dist, version="0.2.0+pt213cpu")
    make_wheel(dist, version="0.2.0.0+pt213cpu", torch_requirement="torch>=2.13")
    run = kiln("index", dist, tmp_path / "site")
    assert run.code == 1, run.stderr
    assert "0.2.0.0+pt213cpu" in run.stderr and "opkiln-0.2.0+pt213cpu" in run.stderr
    assert not (tmp_path / "site").exists()


def test_other_tags_of_one_version_are_other_distributions(site: Path, tmp_path: Path) -> None:
    make_wheel(tmp_path / "dist", python_tag="cp312")
    run = kiln("index", tmp_path / "dist", site)
    assert run.code == 0, run.stderr
    assert (site / "wheels" / "opkiln-0.1.0+pt213cpu-cp312-cp312-linux_x86_64.whl").is_file()


# Generated spellings of the published distribution: each component varies the ways PEP 503
# (name case), PEP 440 (leading zeros, trailing zero segments, a leading v, local-version case)
# and the wheel-name rules (build tag, compressed tag sets that keep the published tag) allow.
def _any_case(text: str) -> st.SearchStrategy[str]:
    return st.tuples(*[st.sampled_from(sorted({c.lower(), c.upper()})) for c in text]).map("".join)


@st.composite
def equivalent_filenames(draw: st.DrawFn) -> str:
    name = draw(_any_case("opkiln"))
    release = ".".join(draw(st.sampled_from(["", "0", "00"])) + part for part in ("0", "1", "0"))
    release += ".0" * draw(st.integers(0, 3))
    prefix = draw(st.sampled_from(["", "v", "V"]))
    local = draw(_any_case("pt213cpu"))
    build = draw(st.sampled_from(["", "-1", "-7_rebuild"]))
    extra = draw(st.lists(st.sampled_from(["manylinux_2_28_x86_64", "manylinux_2_34_x86_64"]), unique=True))
    platforms = ".".join(draw(st.permutations(["linux_x86_64", *extra])))
    return f"{name}-{prefix}{release}+{local}{build}-cp311-cp311-{platforms}.whl"


@pytest.fixture(scope="module")
def shared_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One published wheel; every generated run against it is refused, so it never changes."""
    root = tmp_path_factory.mktemp("identity")
    make_wheel(root / "dist0")
    out = root / "site"
    assert kiln("index", root / "dist0", out).code == 0
    return out


@settings(max_examples=40, derandomize=True, database=None, deadline=None)
@given(filename=equivalent_filenames())
def test_no_generated_equivalent_spelling_gets_through(shared_site: Path, filename: str) -> None:
    before = tree(shared_site)
    with tempfile.TemporaryDirectory() as tmp:
        name, version = filename.split("-")[:2]
        wheel = make_wheel(Path(tmp) / "dist", name=name, version=version, filename=filename,
                           torch_requirement="torch<2.14,>=2.13.1")  # other bytes than the published wheel
        run = kiln("index", wheel.parent, shared_site)
    assert run.code == 1, run.stdout + run.stderr
    assert filename in run.stderr and PUBLISHED in run.stderr
    assert tree(shared_site) == before
