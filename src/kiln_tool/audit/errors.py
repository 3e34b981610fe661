"""Errors of the audit."""

from __future__ import annotations


class AuditInputError(ValueError):
    """The input cannot be audited at all (missing, not a zip, not ELF, unsafe archive).

    `kiln audit` turns it into exit status 2; a failed check is exit status 1.
    """
