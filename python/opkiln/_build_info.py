"""The build info embedded in the wheel (written by the build, never edited by hand)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

BUILD_INFO_FILE = Path(__file__).with_name("_build_info.json")


class BuildInfoMissing(RuntimeError):
    pass


@cache
def _load() -> dict[str, Any]:
    try:
        text = BUILD_INFO_FILE.read_text()
    except FileNotFoundError:
        raise BuildInfoMissing(
            f"{BUILD_INFO_FILE} is missing: this opkiln was not installed from a wheel or a build. "
            "Reinstall it (pip install --force-reinstall opkiln -f <index page>)."
        ) from None
    data: dict[str, Any] = json.loads(text)
    return data


def build_info() -> dict[str, Any]:
    """What this opkiln was built for and from: versions, CUDA archs, ABI, flags, commit, op manifest."""
    return dict(_load())
