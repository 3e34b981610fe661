"""SOURCE_DATE_EPOCH: the one time stamp every step of a build records (zip entries, SBOM)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ZIP_EPOCH_MIN = "315532800"  # 1980-01-01, the earliest time a zip entry can hold


def source_date_epoch(root: Path | None = None) -> str:
    """$SOURCE_DATE_EPOCH when set, else the commit time of HEAD of the project in ``root`` (default: the
    project kiln serves, kiln_tool.project.project_dir) (1980-01-01 outside git)."""
    if os.environ.get("SOURCE_DATE_EPOCH"):
        return os.environ["SOURCE_DATE_EPOCH"]
    if root is None:
        from .project import project_dir

        root = project_dir()
    try:
        out = subprocess.run(["git", "-C", str(root), "log", "-1", "--format=%ct"], capture_output=True,
                             text=True, check=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ZIP_EPOCH_MIN
    return out.stdout.strip() or ZIP_EPOCH_MIN
