"""The source fallback's version rules (issue 42, item 2): kiln's sdist is named with the plain version only, and a
build from an unpacked sdist keeps the plain version only when that sdist's PKG-INFO says it is unlabelled."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kiln_tool.build_metadata import from_unlabelled_sdist
from kiln_tool.commands.sdist import SdistError, sdist_filename

releases = st.lists(st.integers(0, 30), min_size=1, max_size=4).map(lambda parts: ".".join(map(str, parts)))
labels = st.from_regex(r"pt2[0-9]{1,2}(cpu|cu1[0-9]{2})", fullmatch=True)


@given(base=releases, label=labels)
def test_a_build_is_plain_only_from_an_unlabelled_sdist(tmp_path_factory: pytest.TempPathFactory, base: str,
                                                       label: str) -> None:
    folder = tmp_path_factory.mktemp("unpacked")
    assert not from_unlabelled_sdist(folder, base)  # a checkout: no PKG-INFO
    (folder / "PKG-INFO").write_text(f"Metadata-Version: 2.4\nName: ringops\nVersion: {base}+{label}\n\nbody\n")
    assert not from_unlabelled_sdist(folder, base)  # scikit-build-core's own, labelled sdist
    (folder / "PKG-INFO").write_text(f"Metadata-Version: 2.4\nName: ringops\nVersion: {base}\n\nVersion: x\n")
    assert from_unlabelled_sdist(folder, base)
    (folder / "PKG-INFO").write_text(f"Metadata-Version: 2.4\nName: ringops\n\nVersion: {base}\n")
    assert not from_unlabelled_sdist(folder, base)  # only the header counts, not the description


@given(base=releases, label=labels)
def test_the_sdist_name_is_never_labelled(base: str, label: str) -> None:
    assert sdist_filename("Ring-Ops", base) == f"ring_ops-{base}.tar.gz"
    with pytest.raises(SdistError, match="local label"):
        sdist_filename("ringops", f"{base}+{label}")


def test_the_sdist_name_is_pep_625s() -> None:
    assert sdist_filename("ringops", "0.3.0") == "ringops-0.3.0.tar.gz"
    assert sdist_filename("my.ops", "1.0") == "my_ops-1.0.tar.gz"
