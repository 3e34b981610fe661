"""Which (torch minor, CUDA tag) combinations a wheel belongs to.

Derived from the wheel's build info and METADATA, not from its version string:
a per-torch-minor wheel (abi_mode "torch") belongs to exactly the torch minor it
was built against; a stable-ABI wheel (abi_mode "stable", ``torch>=2.13``)
belongs to every torch minor its torch requirement admits, taken from the
torch versions data/matrix.json knows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

_PY_TAG = re.compile(r"cp3([0-9]{1,2})(-abi3)?")
_CUDA_TAG = re.compile(r"cu([0-9]+)([0-9])")


@dataclass(frozen=True)
class Combination:
    """One torch minor and one CUDA tag: one find-links page, one flat page."""

    torch: str
    """torch major.minor, e.g. ``2.14``."""
    cuda: str
    """``cpu`` or ``cu130``-style tag."""

    @property
    def sort_key(self) -> tuple[tuple[int, ...], tuple[int, int], str]:
        # Newest torch first, then CPU before CUDA, newest CUDA first.
        cuda_rank = (0, 0) if self.cuda == "cpu" else (1, -int(self.cuda[2:]))
        return tuple(-int(p) for p in self.torch.split(".")), cuda_rank, self.cuda

    @property
    def page(self) -> str:
        """The find-links page, relative to the site root (download.openmmlab.com layout)."""
        return f"{self.cuda}/torch{self.torch}/index.html"

    @property
    def flat_page(self) -> str:
        """The flat page, relative to the site root (data.pyg.org layout)."""
        return f"torch-{self.torch}.0+{self.cuda}.html"

    @property
    def cuda_label(self) -> str:
        return cuda_label(self.cuda)


def cuda_label(tag: str) -> str:
    """``cpu`` -> ``CPU``, ``cu130`` -> ``CUDA 13.0``, ``cu118`` -> ``CUDA 11.8``."""
    match = _CUDA_TAG.fullmatch(tag)
    if tag == "cpu" or match is None:
        return tag.upper()
    return f"CUDA {int(match.group(1))}.{match.group(2)}"


def python_support(python_tag: str) -> tuple[str, bool]:
    """``cp311`` -> (``3.11``, False); ``cp310-abi3`` -> (``3.10``, True): the minimum and whether newer fit."""
    match = _PY_TAG.fullmatch(python_tag)
    if match is None:
        raise ValueError(f"unsupported python tag {python_tag!r}")
    return f"3.{int(match.group(1))}", match.group(2) is not None


@dataclass(frozen=True)
class TorchCatalog:
    """The torch releases (with their CUDA variants) and Pythons that data/matrix.json knows."""

    releases: tuple[tuple[str, frozenset[str]], ...] = ()
    pythons: tuple[str, ...] = ()
    torch_pythons: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """torch major.minor -> the Pythons that torch release publishes wheels for."""
    torch_index: str | None = None
    """Where torch's own wheels are, with ``{variant}`` for the CUDA tag."""

    @classmethod
    def from_matrix(cls, path: Path | None = None) -> TorchCatalog:
        from kiln_tool import matrix_data

        matrix = matrix_data.load() if path is None else matrix_data.load(path)
        releases = {r.version: frozenset(r.variants) for r in matrix.torch}
        for spec in matrix.local:
            releases[spec.torch] = releases.get(spec.torch, frozenset()) | {spec.cuda}
        torch_pythons = {r.major_minor: tuple(r.python) for r in matrix.torch}
        return cls(releases=tuple(sorted(releases.items())), pythons=tuple(matrix.python),
                   torch_pythons=tuple(sorted(torch_pythons.items())), torch_index=matrix.torch_index)


@cache
def combinations_for(abi_mode: str, cuda_tag: str, torch_major_minor: str, torch_requirement: str | None,
                     catalog: TorchCatalog) -> frozenset[Combination]:
    """The combinations one wheel is listed under.

    A per-torch wheel: its own. A stable-ABI wheel: also every torch release of the
    catalog that its torch requirement admits and that is published for its CUDA tag.
    """
    own = Combination(torch_major_minor, cuda_tag)
    if abi_mode != "stable" or not torch_requirement:
        return frozenset({own})
    try:
        spec = SpecifierSet(torch_requirement)
    except InvalidSpecifier:
        return frozenset({own})
    combos = {own}
    for text, variants in catalog.releases:
        try:
            version = Version(text)
        except InvalidVersion:
            continue
        if cuda_tag in variants and spec.contains(version, prereleases=True):
            combos.add(Combination(f"{version.major}.{version.minor}", cuda_tag))
    return frozenset(combos)
