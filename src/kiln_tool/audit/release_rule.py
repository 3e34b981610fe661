"""The release rule `kiln audit --release` holds wheels to: the release floor, or a stand-in base's one tag."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable

from .context import ReleaseRule

STANDIN_ENV = "KILN_STANDIN_MANYLINUX"


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr)


def release_rule(say: Callable[[str], None] = _to_stderr) -> ReleaseRule:
    """The release floor from the matrix's manylinux_floor; the stand-in's one tag from $KILN_STANDIN_MANYLINUX
    (`say` is told that such a run makes no release wheel). ValueError for a malformed floor or tag."""
    from ..matrix_data import load_matrix

    floor = str(load_matrix().get("manylinux_floor", ""))
    match = re.fullmatch(r"manylinux_(\d+)_(\d+)", floor)
    if not match:
        raise ValueError(f"data/matrix.json manylinux_floor {floor!r} is not like manylinux_2_28")
    standin = os.environ.get(STANDIN_ENV, "").strip() or None
    if standin is not None and not re.fullmatch(r"manylinux_\d+_\d+", standin):
        raise ValueError(f"{STANDIN_ENV}={standin!r} is not like manylinux_2_34")
    if standin is not None:
        say(f"kiln audit: STAND-IN run ({STANDIN_ENV}={standin}): wheels must carry that tag; "
            f"none of them is a release wheel (the release floor is {floor})")
    return ReleaseRule(floor=(int(match.group(1)), int(match.group(2))), standin_tag=standin)
