"""``python -m opkiln doctor [--json]``: the doctor of opkiln's import guard (``python -m opkiln._kiln doctor``)."""

from __future__ import annotations

import sys

from ._kiln.__main__ import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m opkiln"))
