"""Which variant a build produces, decided from KILN_VARIANT, KILN_ABI_MODE, the project's [tool.kiln]
table and the torch it builds against; and the version label and torch pin that follow from it.

``auto`` (the default) matches the torch: a CUDA torch gives a CUDA build, which then
fails loudly without a usable nvcc. ``cpu`` is the explicit way to build CPU-only
kernels against any torch; ``cuda`` insists on CUDA and refuses a CPU torch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .torch_probe import TorchInstall

if TYPE_CHECKING:
    from .project import KilnProject

VARIANT_ENV = "KILN_VARIANT"
MODE_ENV = "KILN_ABI_MODE"
VARIANTS = ("auto", "cpu", "cuda")
MODES = ("torch", "stable")


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


def resolve_variant(torch: TorchInstall, env: dict[str, str] | None = None,
                    project: KilnProject | None = None) -> BuildVariant:
    """``project``: its [tool.kiln] abi list gives the default mode and the modes KILN_ABI_MODE may pick."""
    env = dict(os.environ) if env is None else env
    requested = env.get(VARIANT_ENV, "auto").strip().lower() or "auto"
    if requested not in VARIANTS:
        raise VariantError(f"{VARIANT_ENV}={requested!r} is not one of {', '.join(VARIANTS)}")
    allowed = project.abi_modes if project is not None else MODES
    mode = env.get(MODE_ENV, "").strip().lower() or allowed[0]
    if mode not in MODES:
        raise VariantError(f"{MODE_ENV}={mode!r} is not one of {', '.join(MODES)}")
    if mode not in allowed:
        raise VariantError(f"{MODE_ENV}={mode!r}, but tool.kiln.abi of {project.name if project else 'the project'} "
                           f"lists only {', '.join(allowed)}")
    if requested == "cpu":
        return BuildVariant(cuda=None, mode=mode)
    if requested == "cuda" and torch.cuda is None:
        raise VariantError(
            f"{VARIANT_ENV}=cuda but torch {torch.version} at {torch.root} is a CPU build; "
            "install a CUDA torch (e.g. torch==2.14.1) or set KILN_VARIANT=cpu"
        )
    return BuildVariant(cuda=torch.cuda, mode=mode)


def local_label(torch: TorchInstall, variant: BuildVariant) -> str:
    """``pt214cu130`` per torch minor; ``cu130`` in stable-ABI mode."""
    if variant.mode == "stable":
        return variant.cuda_tag
    major, minor = torch.major_minor.split(".")
    return f"pt{major}{minor}{variant.cuda_tag}"


def wheel_version(torch: TorchInstall, variant: BuildVariant, base: str) -> str:
    """``0.1.0+pt214cu130`` per torch minor; ``0.1.0+cu130`` in stable-ABI mode."""
    return f"{base}+{local_label(torch, variant)}"


def torch_requirement(torch: TorchInstall, variant: BuildVariant, stable_min: str) -> str:
    if variant.mode == "stable":
        return f"torch>={stable_min}"
    major, minor = torch.major_minor.split(".")
    return f"torch>={major}.{minor},<{major}.{int(minor) + 1}"
