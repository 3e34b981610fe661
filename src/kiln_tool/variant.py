"""Which variant a build produces, decided from KILN_VARIANT and the torch it builds against.

``auto`` (the default) matches the torch: a CUDA torch gives a CUDA build, which then
fails loudly without a usable nvcc. ``cpu`` is the explicit way to build CPU-only
kernels against any torch; ``cuda`` insists on CUDA and refuses a CPU torch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .torch_probe import TorchInstall

VARIANT_ENV = "KILN_VARIANT"
MODE_ENV = "KILN_ABI_MODE"
VARIANTS = ("auto", "cpu", "cuda")
MODES = ("torch", "stable")

REPO_ROOT = Path(__file__).resolve().parents[2]


class VariantError(ValueError):
    pass


@dataclass(frozen=True)
class BuildVariant:
    cuda: str | None
    """CUDA version the kernels target (torch's own), None for CPU kernels."""
    mode: str
    """``torch`` (per-torch-minor wheels) or ``stable`` (LibTorch stable ABI)."""

    @property
    def cuda_tag(self) -> str:
        return "cpu" if self.cuda is None else "cu" + self.cuda.replace(".", "")


def resolve_variant(torch: TorchInstall, env: dict[str, str] | None = None) -> BuildVariant:
    env = dict(os.environ) if env is None else env
    requested = env.get(VARIANT_ENV, "auto").strip().lower() or "auto"
    if requested not in VARIANTS:
        raise VariantError(f"{VARIANT_ENV}={requested!r} is not one of {', '.join(VARIANTS)}")
    mode = env.get(MODE_ENV, "torch").strip().lower() or "torch"
    if mode not in MODES:
        raise VariantError(f"{MODE_ENV}={mode!r} is not one of {', '.join(MODES)}")
    if requested == "cpu":
        return BuildVariant(cuda=None, mode=mode)
    if requested == "cuda" and torch.cuda is None:
        raise VariantError(
            f"{VARIANT_ENV}=cuda but torch {torch.version} at {torch.root} is a CPU build; "
            "install a CUDA torch (e.g. torch==2.14.1) or set KILN_VARIANT=cpu"
        )
    return BuildVariant(cuda=torch.cuda, mode=mode)


def base_version() -> str:
    return (REPO_ROOT / "VERSION").read_text().strip()


def wheel_version(torch: TorchInstall, variant: BuildVariant) -> str:
    """``0.1.0+pt214cu130`` per torch minor; ``0.1.0+cu130`` in stable-ABI mode."""
    if variant.mode == "stable":
        return f"{base_version()}+{variant.cuda_tag}"
    major, minor = torch.major_minor.split(".")
    return f"{base_version()}+pt{major}{minor}{variant.cuda_tag}"


def torch_requirement(torch: TorchInstall, variant: BuildVariant, stable_min: str) -> str:
    if variant.mode == "stable":
        return f"torch>={stable_min}"
    major, minor = torch.major_minor.split(".")
    return f"torch>={major}.{minor},<{major}.{int(minor) + 1}"
