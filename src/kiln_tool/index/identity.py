"""One notion of identity for a published distribution: its normalized project name, normalized
version and tag set (PEP 503 names, PEP 440 versions, PEP 427/425 wheel tags).

Two wheel files are the same distribution when their names canonicalize alike, their versions are
equal under PEP 440 (``0.1.0`` == ``0.1.0.0``, ``+PT213CPU`` == ``+pt213cpu``) and their tag sets
share a tag (an installer choosing for that tag could get either file). The build tag is not part
of the identity: pip prefers the higher build tag, so a "new build" of a published version would
replace it for every user; a new build must get a new version.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from packaging.tags import Tag
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

from .wheels import check_wheel_name


@dataclass(frozen=True)
class Identity:
    project: NormalizedName
    version: Version
    tags: frozenset[Tag]

    @staticmethod
    def of(filename: str) -> Identity:
        """The identity a wheel file name states (IndexInputError for a name that is not a wheel's)."""
        return _identity(filename)


def _parse_identity(filename: str) -> Identity:
    name, version, _build, tags = check_wheel_name(filename)
    return Identity(canonicalize_name(name), version, frozenset(tags))


_identity = functools.cache(_parse_identity)  # wrapped, not decorated: mutation testing mutates the function


class Identities:
    """Wheel files by identity: which known file, if any, is the same distribution as a given name."""

    def __init__(self) -> None:
        self._by_release: dict[tuple[NormalizedName, Version], list[tuple[frozenset[Tag], str, str]]] = {}

    def add(self, filename: str, sha256: str) -> None:
        ident = Identity.of(filename)
        self._by_release.setdefault((ident.project, ident.version), []).append((ident.tags, filename, sha256))

    def find(self, filename: str) -> tuple[str, str] | None:
        """(file name, sha256) of a known file that is the same distribution as ``filename``."""
        ident = Identity.of(filename)
        for tags, known, sha256 in self._by_release.get((ident.project, ident.version), ()):
            if tags & ident.tags:
                return known, sha256
        return None

    def equivalent(self, filename: str) -> str | None:
        found = self.find(filename)
        return found[0] if found else None


__all__ = ["Identities", "Identity"]
