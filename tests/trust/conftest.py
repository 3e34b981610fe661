"""The site most trust tests start from."""

from __future__ import annotations

from pathlib import Path

import pytest

from index.synthetic_wheels import make_wheel
from trust.kiln_runs import kiln


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """OUT holding one published wheel (0.1.0), and DIST (tmp_path/dist) holding a new one (0.2.0)."""
    out = tmp_path / "site"
    make_wheel(tmp_path / "dist0")
    assert kiln("index", tmp_path / "dist0", out).code == 0
    make_wheel(tmp_path / "dist", version="0.2.0+pt213cpu")
    return out
