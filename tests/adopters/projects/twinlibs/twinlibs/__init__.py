"""twinlibs: two op libraries, each loaded with torch.ops.load_library; the ops are torch.ops.twinlibs.*."""

from __future__ import annotations

import importlib.machinery
from pathlib import Path

import torch

_HERE = Path(__file__).resolve().parent


def _load(stem: str) -> None:
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        library = _HERE / f"{stem}{suffix}"
        if library.is_file():
            torch.ops.load_library(str(library))
            return
    raise ImportError(f"twinlibs: no {stem} library beside {__file__}")


_load("_axpy")
_load("_prefix_sum")


def axpy(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    """alpha * x + y (float32, CPU)."""
    return torch.ops.twinlibs.axpy(x, y, alpha)


def prefix_sum(x: torch.Tensor) -> torch.Tensor:
    """The inclusive running sum over the last dimension, like torch.cumsum(x, -1) (float32, CPU)."""
    return torch.ops.twinlibs.prefix_sum(x)


__all__ = ["axpy", "prefix_sum"]
