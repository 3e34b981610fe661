#!/usr/bin/env python3
"""Fetch what the published wheel site holds (kiln_tool.index.fetch; `kiln release` runs the same code).

    python tools/fetch_published_site.py URL OUT_DIR [--allow-missing]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from kiln_tool.index.fetch import main

if __name__ == "__main__":
    raise SystemExit(main())
