"""The kiln-wheel definition for any configured project: a wheel file name claims the project only in the one
spelling kiln writes (PEP 427's escape of the canonical name); every other spelling of the same name, and
every other name, is refused with the rule it breaks."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln_tool import kiln_wheel
from kiln_tool.project import canonical_name

TAIL = "-0.3.0+pt213cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
PART = st.from_regex(r"[A-Za-z][A-Za-z0-9]{0,6}", fullmatch=True)
NAMES = st.lists(PART, min_size=1, max_size=3).flatmap(
    lambda parts: st.lists(st.sampled_from(["-", "_", ".", "--", "_."]), min_size=len(parts) - 1,
                           max_size=len(parts) - 1).map(
        lambda seps: parts[0] + "".join(s + p for s, p in zip(seps, parts[1:], strict=True))))


@settings(max_examples=200, deadline=None)
@given(configured=NAMES, spelled=NAMES)
def test_only_kilns_spelling_of_the_configured_name_is_the_project(configured: str, spelled: str) -> None:
    project = canonical_name(configured)
    package = re.sub(r"[-.]+", "_", configured).lower()
    filename = spelled + TAIL
    if spelled == project.replace("-", "_"):
        name = kiln_wheel.check_name(filename, project, package)
        assert (name.project, name.package) == (project, package)
        assert name.dist_info == f"{spelled}-0.3.0+pt213cpu.dist-info"
        return
    with pytest.raises(kiln_wheel.NotAKilnWheel) as info:
        kiln_wheel.check_name(filename, project, package)
    if "-" in spelled:  # a '-' splits the file name into other fields: no wheel name of any project
        assert str(info.value).startswith("file name:"), str(info.value)
    else:
        rule = "file name: the project is spelled" if canonical_name(spelled) == project else "project:"
        assert str(info.value).startswith(rule), str(info.value)
    if "-" not in spelled:  # (a name with '-' is judged by its first field, and then refused above)
        assert kiln_wheel.is_kiln_project(filename, project) == (canonical_name(spelled) == project)
