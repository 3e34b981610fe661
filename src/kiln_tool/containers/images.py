"""The base image (real manylinux_2_28 by digest, or the stand-in) and kiln's build recipe built on it.

The recipe is kiln's, whatever project it builds: docker/Dockerfile (resources.docker_dir), a manylinux
base, one pinned CUDA toolkit from NVIDIA's PyPI wheels and ccache. Every image kiln builds is tagged with a
digest of its inputs (the recipe folder, the build arguments from the project's matrix and the base image's
id), so a rerun with nothing changed builds nothing, and a changed input can never reuse a stale image.
"""

from __future__ import annotations

import hashlib
import os
import platform as _platform
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .. import resources
from ..matrix_data import Matrix, docker_build_args
from ..matrix_data import load as load_matrix
from .engine import ContainerError, Engine, docker, image_exists, prune_tags
from .standin import StandinImages, docker_platform, ensure_standin

DOCKER_DIR = resources.docker_dir()
BASES = ("auto", "real", "standin")


@dataclass(frozen=True)
class Base:
    image: str
    """What FROM gets: the pinned real image or the stand-in build image."""
    standin: StandinImages | None
    """None: the real manylinux_2_28 image."""

    @property
    def label(self) -> str:
        if self.standin is None:
            return "manylinux_2_28"
        return f"standin-{self.standin.suite}-glibc{self.standin.glibc}"

    def describe(self) -> str:
        return self.standin.describe() if self.standin else f"the real manylinux_2_28 image ({self.image})"

    @property
    def runtime_image(self) -> str:
        """An image without build tools, for installing as a user would."""
        return self.standin.runtime if self.standin else self.image


def _try_pull(engine: Engine, ref: str) -> bool:
    if image_exists(engine, ref):
        return True
    try:
        proc = subprocess.run([engine.docker, "pull", "-q", ref], capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return False
    return proc.returncode == 0


def ensure_base(engine: Engine, choice: str = "auto", arch: str | None = None, matrix: Matrix | None = None) -> Base:
    """The base `choice` names for `arch`; the real image is the one `matrix` (default: kiln's) pins."""
    arch = arch or _platform.machine()
    if choice not in BASES:
        raise ContainerError(f"--base {choice!r} is not one of {', '.join(BASES)}")
    real = (matrix or load_matrix()).platform(arch).manylinux_base
    if choice in ("auto", "real"):
        if _try_pull(engine, real):
            print(f"containers: base: the real manylinux_2_28 image {real}", flush=True)
            return Base(image=real, standin=None)
        if choice == "real":
            raise ContainerError(f"cannot pull {real} (no image registry reachable?); use --base standin")
        print(f"containers: cannot pull {real}: no image registry reachable; using the STAND-IN", flush=True)
    standin = ensure_standin(engine, arch)
    return Base(image=standin.build, standin=standin)


def _folder_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(folder)).encode() + b"\0")
        digest.update(b"x" if os.access(path, os.X_OK) else b"-")
        digest.update(path.read_bytes())
    return digest.hexdigest()


def ensure_build_image(engine: Engine, base: Base, variant: str, arch: str | None = None,
                       log: Path | None = None, matrix: Matrix | None = None) -> str:
    """kiln's Dockerfile built on `base` for `variant` (cpu, cu130, ...), with the build arguments of `matrix`
    (default: kiln's)."""
    arch = arch or _platform.machine()
    if not (DOCKER_DIR / "Dockerfile").is_file():
        raise ContainerError(f"{DOCKER_DIR / 'Dockerfile'} is missing: this kiln installation lacks its container "
                             "recipe")
    args = docker_build_args(matrix or load_matrix(), variant, arch)
    args = [f"BASE_IMAGE={base.image}" if a.startswith("BASE_IMAGE=") else a for a in args]
    if base.standin is not None and base.standin.tool_python:
        args += ["--build-arg", f"TOOL_PYTHON={base.standin.tool_python}"]  # the CPython the stand-in has
    base_id = docker(engine, "image", "inspect", "--format", "{{.Id}}", base.image, capture=True).strip()
    digest = hashlib.sha256("\0".join([_folder_digest(DOCKER_DIR), base_id, *args]).encode()).hexdigest()[:16]
    tag = f"kiln-{base.label}-{variant}-{arch}:{digest}"
    if image_exists(engine, tag):
        print(f"containers: build image {tag} (cached)", flush=True)
        return tag
    print(f"containers: building {tag} from {DOCKER_DIR / 'Dockerfile'} on {base.describe()}", flush=True)
    env_args = ["build", "--network", "host", "--platform", docker_platform(arch), "--tag", tag]
    env_args += args
    env_args.append(str(DOCKER_DIR))
    os.environ.setdefault("DOCKER_BUILDKIT", "0")  # the classic builder: docker.io's daemon has no buildx here
    docker(engine, *env_args, log=log)
    stale = prune_tags(engine, tag.split(":")[0], {tag})
    if stale:
        print(f"containers: removed build images of earlier inputs: {', '.join(stale)}", flush=True)
    return tag
