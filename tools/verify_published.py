#!/usr/bin/env python3
"""Verify every file a published index lists, by sha256 (kiln_tool.index.verify; verify-index.yml runs it).

    python tools/verify_published.py PAGES_URL [--storage FILE] [--repository OWNER/NAME] [--download]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from kiln_tool.index.verify import main

if __name__ == "__main__":
    raise SystemExit(main())
