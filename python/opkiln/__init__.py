"""opkiln: PyTorch custom operators shipped as hardened, audited wheels.

``import opkiln`` loads the compiled library, so every operator is registered
as ``torch.ops.opkiln.*`` after a plain import. Before loading, kiln's import
guard (``opkiln/_kiln/``, generated into the wheel like into every kiln-built
package: docs/import-guard.md) compares the wheel's build info with the running
torch and Python; a mismatch raises :class:`OpkilnEnvironmentError` with the
exact fix (``OPKILN_SKIP_PREFLIGHT=1`` skips the comparison).
``python -m opkiln doctor`` checks an environment.
"""

from __future__ import annotations

from ._kiln import guard

OpkilnEnvironmentError = guard.error_class()
guard.load(__name__)

from . import ops  # noqa: E402 - the ops need the library the guard loaded
from ._kiln.buildinfo import build_info  # noqa: E402
from .ops import *  # noqa: E402, F403 - the public ops are listed in ops.__all__

__version__: str = build_info()["version"]
__all__ = ["OpkilnEnvironmentError", "__version__", "build_info", "ops", *ops.__all__]
