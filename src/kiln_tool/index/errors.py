"""Errors of `kiln index`, each carrying the exit code the command returns for it."""

from __future__ import annotations


class KilnIndexError(Exception):
    exit_code = 2


class IndexInputError(KilnIndexError):
    """Unusable input (a bad wheel, a bad directory, a bad option): exit 2, nothing written."""

    exit_code = 2


class IndexConflictError(KilnIndexError):
    """A wheel name already published with other bytes: exit 1, nothing written."""

    exit_code = 1


class IndexIntegrityError(KilnIndexError):
    """A published file no longer has the bytes the manifest records: exit 1, nothing written."""

    exit_code = 1


class AuditRefusedError(KilnIndexError):
    """A wheel failed the audit: exit 1, nothing written. The message is the audit's report."""

    exit_code = 1
