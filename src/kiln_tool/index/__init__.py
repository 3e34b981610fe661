"""`kiln index`: a static wheel site (find-links pages, flat pages, a PEP 503 simple index, a landing page).

Importable without torch; packaging is the only dependency.
"""

from __future__ import annotations

from .errors import AuditRefusedError, IndexConflictError, IndexInputError, IndexIntegrityError, KilnIndexError
from .publish import IndexResult, build_index, kiln_audit, normalize_base_url

__all__ = [
    "AuditRefusedError",
    "IndexConflictError",
    "IndexInputError",
    "IndexIntegrityError",
    "IndexResult",
    "KilnIndexError",
    "build_index",
    "kiln_audit",
    "normalize_base_url",
]
