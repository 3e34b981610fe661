"""kiln_tool.index.identity field by field: each part of the identity (project, version, tags) tells two
distributions apart on its own, and the parts that are not the identity (the build tag, spellings) do not."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.tags import Tag
from packaging.version import Version

from kiln_tool.index.errors import IndexInputError
from kiln_tool.index.identity import Identities, Identity

BASE = "opkiln-0.1.0-cp311-cp311-linux_x86_64.whl"


def test_an_identity_is_the_normalized_name_version_and_tag_set() -> None:
    ident = Identity.of("Op_Kiln-0.1.0.0+PT213CPU-7-cp311-cp311-linux_x86_64.manylinux_2_28_x86_64.whl")
    assert ident.project == "op-kiln"
    assert ident.version == Version("0.1+pt213cpu")
    assert ident.tags == frozenset({Tag("cp311", "cp311", "linux_x86_64"),
                                    Tag("cp311", "cp311", "manylinux_2_28_x86_64")})


def test_a_name_that_is_not_a_wheel_has_no_identity() -> None:
    with pytest.raises(IndexInputError, match="not a wheel"):
        Identity.of("opkiln-0.1.0.tar.gz")


@pytest.mark.parametrize("other", [
    "kilnop-0.1.0-cp311-cp311-linux_x86_64.whl",  # another project, same version and tags
    "opkiln-0.2.0-cp311-cp311-linux_x86_64.whl",  # another version
    "opkiln-0.1.0+pt214cpu-cp311-cp311-linux_x86_64.whl",  # another local version
    "opkiln-0.1.0-cp312-cp312-linux_x86_64.whl",  # disjoint tags
    "opkiln-0.1.0-cp311-cp311-manylinux_2_28_x86_64.whl",  # disjoint tags, same Python
])
def test_one_part_differing_is_another_distribution(other: str) -> None:
    known = Identities()
    known.add(BASE, "a" * 64)
    assert known.find(other) is None
    assert known.equivalent(other) is None
    assert Identity.of(other) != Identity.of(BASE)


@pytest.mark.parametrize("same", [
    "OpKiln-0.1.0-cp311-cp311-linux_x86_64.whl",
    "opkiln-0.1.0.0-cp311-cp311-linux_x86_64.whl",
    "opkiln-0.1.0-1-cp311-cp311-linux_x86_64.whl",
    "opkiln-0.1.0-cp311-cp311-linux_x86_64.manylinux_2_28_x86_64.whl",
    "opkiln-0.1.0-cp311.cp312-cp311-linux_x86_64.whl",
])
def test_another_spelling_is_the_same_distribution(same: str) -> None:
    known = Identities()
    known.add(BASE, "a" * 64)
    assert known.find(same) == (BASE, "a" * 64)
    assert known.equivalent(same) == BASE


def test_two_projects_of_one_version_and_tags_are_kept_apart() -> None:
    known = Identities()
    known.add("alpha-1.0-py3-none-any.whl", "1" * 64)
    known.add("beta-1.0-py3-none-any.whl", "2" * 64)
    assert known.find("Alpha-1.0-py3-none-any.whl") == ("alpha-1.0-py3-none-any.whl", "1" * 64)
    assert known.find("BETA-1.0.0-py3-none-any.whl") == ("beta-1.0-py3-none-any.whl", "2" * 64)
    assert known.find("gamma-1.0-py3-none-any.whl") is None


def test_the_first_overlapping_file_of_a_release_is_found() -> None:
    known = Identities()
    known.add("opkiln-0.1.0-cp311-cp311-linux_x86_64.whl", "1" * 64)
    known.add("opkiln-0.1.0-cp312-cp312-linux_x86_64.whl", "2" * 64)
    assert known.find("opkiln-0.1.0-cp312-cp312-linux_x86_64.whl") == ("opkiln-0.1.0-cp312-cp312-linux_x86_64.whl",
                                                                      "2" * 64)
    assert known.find("opkiln-0.1.0-cp310-cp310-linux_x86_64.whl") is None


_names = st.sampled_from(["opkiln", "other", "Op.Kiln"])
_versions = st.sampled_from(["0.1.0", "0.1", "0.2.0", "1.0+pt213cpu"])
_pythons = st.sampled_from(["cp310", "cp311", "cp312"])


@settings(max_examples=60, deadline=None)
@given(a=st.tuples(_names, _versions, _pythons), b=st.tuples(_names, _versions, _pythons))
def test_found_exactly_when_name_version_and_a_tag_agree(a: tuple[str, str, str], b: tuple[str, str, str]) -> None:
    def filename(parts: tuple[str, str, str]) -> str:
        name, version, python = parts
        return f"{name}-{version}-{python}-{python}-linux_x86_64.whl"

    known = Identities()
    known.add(filename(a), "0" * 64)
    same = (a[0].lower().replace(".", "-") == b[0].lower().replace(".", "-") and Version(a[1]) == Version(b[1])
            and a[2] == b[2])
    assert (known.find(filename(b)) is not None) == same
