"""opkiln: PyTorch custom operators shipped as hardened, audited wheels.

``import opkiln`` loads the compiled library, so every operator is registered
as ``torch.ops.opkiln.*`` after a plain import. Before loading, the wheel's
build info is compared with the running torch and Python; a mismatch raises
:class:`OpkilnEnvironmentError` with the exact fix (``OPKILN_SKIP_PREFLIGHT=1``
skips the comparison). ``python -m opkiln doctor`` checks an environment.
"""

from __future__ import annotations

import sys

from ._build_info import build_info
from ._preflight import OpkilnEnvironmentError

package_import_error: BaseException | None = None
"""Set only under ``python -m opkiln``: what ``import opkiln`` raised, for doctor to report."""


def _doctor_requested() -> bool:
    # While `python -m opkiln` locates opkiln/__main__.py, argv[0] is "-m" and this package is imported first.
    argv = getattr(sys, "orig_argv", [])
    if sys.argv[:1] != ["-m"] or "-m" not in argv:
        return False
    target = argv[argv.index("-m") + 1] if argv.index("-m") + 1 < len(argv) else ""
    return target in ("opkiln", "opkiln.__main__")


try:
    from ._loader import load_library

    load_library()
except Exception as exc:
    if not _doctor_requested():
        raise
    package_import_error = exc
    __all__ = ["OpkilnEnvironmentError", "build_info"]
else:
    from . import ops
    from .ops import *  # noqa: F403 - the public ops are listed in ops.__all__

    __version__: str = build_info()["version"]
    __all__ = ["OpkilnEnvironmentError", "__version__", "build_info", "ops", *ops.__all__]
