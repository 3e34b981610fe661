"""SOURCE_DATE_EPOCH: the one time stamp every step of a build records (zip entries, SBOM)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
ZIP_EPOCH_MIN = "315532800"  # 1980-01-01, the earliest time a zip entry can hold


def source_date_epoch() -> str:
    """$SOURCE_DATE_EPOCH when set, else the commit time of HEAD (1980-01-01 outside git)."""
    if os.environ.get("SOURCE_DATE_EPOCH"):
        return os.environ["SOURCE_DATE_EPOCH"]
    try:
        out = subprocess.run(["git", "-C", str(REPO_ROOT), "log", "-1", "--format=%ct"], capture_output=True,
                             text=True, check=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ZIP_EPOCH_MIN
    return out.stdout.strip() or ZIP_EPOCH_MIN
