"""opkiln: PyTorch custom operators shipped as hardened, audited wheels.

``import opkiln`` loads the compiled library, so every operator is registered
as ``torch.ops.opkiln.*`` after a plain import. Before loading, the wheel's
build info is compared with the running torch and Python; a mismatch raises
:class:`OpkilnEnvironmentError` with the exact fix (``OPKILN_SKIP_PREFLIGHT=1``
skips the comparison). ``python -m opkiln doctor`` checks an environment.
"""

from __future__ import annotations

from ._build_info import build_info
from ._loader import load_library
from ._preflight import OpkilnEnvironmentError

load_library()

from . import ops  # noqa: E402 - ops registers fake/autograd impls on the loaded library
from .ops import *  # noqa: E402, F403 - the public ops are listed in ops.__all__

__version__: str = build_info()["opkiln_version"]

__all__ = ["OpkilnEnvironmentError", "__version__", "build_info", "ops", *ops.__all__]
