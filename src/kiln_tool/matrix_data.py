"""Loader for data/matrix.json (or a project's own file of its schema: [tool.kiln] matrix), the single source
of truth for what a project builds.

The file lists the supported torch releases (with the Pythons and CUDA variants
each publishes), the CUDA arch list per CUDA version and platform, the
manylinux base images and the stable-ABI settings. This module validates it
and expands it into builds:

* ``torch`` mode: one wheel per torch minor x variant x platform x Python;
  one CI job per torch x variant x platform (cibuildwheel loops over Pythons).
* ``stable`` mode (LibTorch stable ABI, ``KILN_ABI_MODE=stable``): one
  ``cp310-abi3`` wheel per variant x platform, built against the oldest torch
  at or above ``stable_abi.min_torch`` that ships the variant.
"""

from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

from . import resources

MATRIX_FILE = resources.data_path("matrix.json")
SCHEMA_VERSION = 2
MODES = ("torch", "stable")

_PYTHON = re.compile(r"^3\.\d+$")
_TORCH = re.compile(r"^\d+\.\d+\.\d+$")
_VARIANT = re.compile(r"^(cpu|cu\d{3,})$")
_CUDA = re.compile(r"^\d+\.\d+$")
_ARCH = re.compile(r"^(\d+)\.(\d+)([af]?)$")
_DIGEST = re.compile(r"^[a-z0-9.\-/_:]+@sha256:[0-9a-f]{64}$")


class MatrixError(ValueError):
    """data/matrix.json (or a file in its place) is malformed or inconsistent."""


@dataclass(frozen=True, order=True)
class BuildSpec:
    """One wheel to build: exact torch, CUDA tag (cpu, cu126, cu130, ...) and Python."""

    torch: str
    cuda: str
    python: str

    @property
    def torch_major_minor(self) -> str:
        return ".".join(self.torch.split(".")[:2])

    @property
    def name(self) -> str:
        return f"torch{self.torch_major_minor}-{self.cuda}-py{self.python}"

    @property
    def variant_env(self) -> str:
        return "cpu" if self.cuda == "cpu" else "cuda"


@dataclass(frozen=True)
class Platform:
    name: str
    runner: str
    manylinux_base: str


@dataclass(frozen=True)
class TorchRelease:
    version: str
    python: tuple[str, ...]
    variants: tuple[str, ...]

    @property
    def major_minor(self) -> str:
        return ".".join(self.version.split(".")[:2])


@dataclass(frozen=True)
class StableAbi:
    min_torch: str
    python: str
    abi_tag: str


@dataclass(frozen=True)
class Matrix:
    python: tuple[str, ...]
    manylinux_floor: str
    platforms: tuple[Platform, ...]
    torch_index: str
    torch: tuple[TorchRelease, ...]
    cuda_toolkits: dict[str, str]
    cuda_archs: dict[str, dict[str, tuple[str, ...]]]
    stable_abi: StableAbi
    local: tuple[BuildSpec, ...]

    def platform(self, name: str) -> Platform:
        for plat in self.platforms:
            if plat.name == name:
                return plat
        raise MatrixError(f"unknown platform {name!r}; data/matrix.json has {', '.join(self.platform_names)}")

    @property
    def platform_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.platforms)

    def release(self, version: str) -> TorchRelease:
        for release in self.torch:
            if release.version == version:
                return release
        raise MatrixError(f"torch {version} is not in data/matrix.json")

    def index_url(self, variant: str) -> str:
        return self.torch_index.format(variant=variant)


def cuda_version(variant: str) -> str | None:
    """``cu130`` -> ``13.0``; ``cpu`` -> None (torch's own tag convention)."""
    if variant == "cpu":
        return None
    digits = variant[2:]
    return f"{digits[:-1]}.{digits[-1]}"


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def _arch_key(arch: str) -> tuple[int, int, str]:
    match = _ARCH.match(arch)
    assert match is not None
    return int(match.group(1)), int(match.group(2)), match.group(3)


@dataclass(frozen=True)
class MatrixJob:
    """One CI job: cibuildwheel over ``pythons`` for one torch x variant x platform."""

    mode: str
    torch: str
    variant: str
    platform: str
    pythons: tuple[str, ...]
    test_torch: tuple[str, ...]
    """torch releases the built wheel must work with (only the build torch in ``torch`` mode)."""

    @property
    def cuda(self) -> str | None:
        return cuda_version(self.variant)

    @property
    def torch_major_minor(self) -> str:
        return ".".join(self.torch.split(".")[:2])

    @property
    def name(self) -> str:
        if self.mode == "stable":
            return f"stable-{self.variant}-{self.platform}"
        return f"torch{self.torch_major_minor}-{self.variant}-{self.platform}"

    @property
    def identifiers(self) -> tuple[str, ...]:
        """cibuildwheel build identifiers, e.g. ``cp311-manylinux_x86_64``."""
        return tuple(f"cp{py.replace('.', '')}-manylinux_{self.platform}" for py in self.pythons)

    @property
    def specs(self) -> tuple[BuildSpec, ...]:
        return tuple(BuildSpec(torch=self.torch, cuda=self.variant, python=py) for py in self.pythons)

    @property
    def image(self) -> str:
        """Local tag of the docker/ build image for this job (one per variant and platform)."""
        return f"kiln-manylinux_2_28-{self.variant}-{self.platform}"


# -- parsing -----------------------------------------------------------------


def _need(data: dict[str, Any], key: str, kind: type, where: str) -> Any:
    if key not in data:
        raise MatrixError(f"{where}: missing key {key!r}")
    value = data[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise MatrixError(f"{where}.{key}: expected {kind.__name__}, got {type(value).__name__} {value!r}")
    return value


def _strings(values: Any, pattern: re.Pattern[str], where: str, *, sort_key: Any = None) -> tuple[str, ...]:
    if not isinstance(values, list) or not values:
        raise MatrixError(f"{where}: expected a non-empty list")
    for value in values:
        if not isinstance(value, str) or not pattern.match(value):
            raise MatrixError(f"{where}: {value!r} does not look like {pattern.pattern}")
    if len(set(values)) != len(values):
        raise MatrixError(f"{where}: duplicate entries in {values}")
    if sort_key is not None and sorted(values, key=sort_key) != values:
        raise MatrixError(f"{where}: {values} must be in ascending order")
    return tuple(values)


def parse_matrix(data: Any) -> Matrix:
    """Validate the raw JSON of data/matrix.json; every inconsistency is a MatrixError naming its place."""
    if not isinstance(data, dict):
        raise MatrixError("matrix: expected a JSON object")
    version = _need(data, "schema_version", int, "matrix")
    if version != SCHEMA_VERSION:
        raise MatrixError(f"matrix.schema_version: {version}, this kiln reads {SCHEMA_VERSION}")
    python = _strings(data.get("python"), _PYTHON, "matrix.python", sort_key=_version_key)
    floor = _need(data, "manylinux_floor", str, "matrix")
    if not re.fullmatch(r"manylinux_\d+_\d+", floor):
        raise MatrixError(f"matrix.manylinux_floor: {floor!r} is not like manylinux_2_28")

    raw_platforms = _need(data, "platforms", dict, "matrix")
    if not raw_platforms:
        raise MatrixError("matrix.platforms: no platform")
    platforms = []
    for name, entry in raw_platforms.items():
        where = f"matrix.platforms.{name}"
        if name not in ("x86_64", "aarch64"):
            raise MatrixError(f"{where}: unsupported platform (x86_64, aarch64)")
        if not isinstance(entry, dict):
            raise MatrixError(f"{where}: expected an object")
        base = _need(entry, "manylinux_base", str, where)
        if not _DIGEST.match(base) or f"{floor}_{name}" not in base:
            raise MatrixError(
                f"{where}.manylinux_base: {base!r} must be a {floor}_{name} image pinned by @sha256 digest"
            )
        platforms.append(Platform(name=name, runner=_need(entry, "runner", str, where), manylinux_base=base))

    torch_index = _need(data, "torch_index", str, "matrix")
    if "{variant}" not in torch_index:
        raise MatrixError(f"matrix.torch_index: {torch_index!r} must contain {{variant}}")

    toolkits = _need(data, "cuda_toolkits", dict, "matrix")
    for cuda, full in toolkits.items():
        if not _CUDA.match(cuda) or not isinstance(full, str) or not full.startswith(cuda + "."):
            raise MatrixError(f"matrix.cuda_toolkits.{cuda}: {full!r} is not a release of CUDA {cuda}")

    raw_archs = _need(data, "cuda_archs", dict, "matrix")
    cuda_archs: dict[str, dict[str, tuple[str, ...]]] = {}
    for cuda, per_platform in raw_archs.items():
        if not isinstance(per_platform, dict):
            raise MatrixError(f"matrix.cuda_archs.{cuda}: expected an object")
        cuda_archs[cuda] = {
            plat: _strings(archs, _ARCH, f"matrix.cuda_archs.{cuda}.{plat}", sort_key=_arch_key)
            for plat, archs in per_platform.items()
        }

    raw_torch = _need(data, "torch", list, "matrix")
    if not raw_torch:
        raise MatrixError("matrix.torch: no torch release")
    releases: list[TorchRelease] = []
    for i, entry in enumerate(raw_torch):
        where = f"matrix.torch[{i}]"
        if not isinstance(entry, dict):
            raise MatrixError(f"{where}: expected an object")
        tv = _need(entry, "version", str, where)
        if not _TORCH.match(tv):
            raise MatrixError(f"{where}.version: {tv!r} is not an exact release like 2.13.0")
        where = f"matrix.torch[{tv}]"
        release = TorchRelease(
            version=tv,
            python=_strings(entry.get("python"), _PYTHON, f"{where}.python", sort_key=_version_key),
            variants=_strings(entry.get("variants"), _VARIANT, f"{where}.variants"),
        )
        if releases and _version_key(release.major_minor) <= _version_key(releases[-1].major_minor):
            raise MatrixError(f"{where}: torch releases must be one per minor, oldest first")
        for variant in release.variants:
            cuda = cuda_version(variant)
            if cuda is None:
                continue
            if cuda not in toolkits:
                raise MatrixError(f"{where}: variant {variant} needs matrix.cuda_toolkits[{cuda!r}]")
            for plat in platforms:
                if not cuda_archs.get(cuda, {}).get(plat.name):
                    raise MatrixError(f"{where}: variant {variant} needs matrix.cuda_archs[{cuda!r}][{plat.name!r}]")
        releases.append(release)

    raw_stable = _need(data, "stable_abi", dict, "matrix")
    stable = StableAbi(
        min_torch=_need(raw_stable, "min_torch", str, "matrix.stable_abi"),
        python=_need(raw_stable, "python", str, "matrix.stable_abi"),
        abi_tag=_need(raw_stable, "abi_tag", str, "matrix.stable_abi"),
    )
    eligible = [r for r in releases if _version_key(r.major_minor) >= _version_key(stable.min_torch)]
    if not eligible:
        raise MatrixError(f"matrix.stable_abi.min_torch: no torch release at or above {stable.min_torch}")
    if stable.python not in python:
        raise MatrixError(f"matrix.stable_abi.python: {stable.python} is not one of matrix.python")
    expected_tag = f"cp{stable.python.replace('.', '')}-abi3"
    if stable.abi_tag != expected_tag:
        raise MatrixError(
            f"matrix.stable_abi.abi_tag: {stable.abi_tag!r}, expected {expected_tag!r} for Python {stable.python}"
        )

    matrix = Matrix(
        python=python,
        manylinux_floor=floor,
        platforms=tuple(platforms),
        torch_index=torch_index,
        torch=tuple(releases),
        cuda_toolkits=dict(toolkits),
        cuda_archs=cuda_archs,
        stable_abi=stable,
        local=(),
    )
    build_jobs(matrix, "stable")  # raises when a variant's stable build torch lacks the stable Python

    raw_local = _need(data, "local", list, "matrix")
    local = []
    buildable = {spec for job in build_jobs(matrix, "torch") for spec in job.specs}
    for i, entry in enumerate(raw_local):
        if not isinstance(entry, dict) or set(entry) != {"torch", "cuda", "python"}:
            raise MatrixError(f"matrix.local[{i}]: expected exactly torch, cuda and python, got {entry!r}")
        spec = BuildSpec(**entry)
        if spec not in buildable:
            raise MatrixError(f"matrix.local[{i}]: {spec.name} (torch {spec.torch}) is not in the full matrix")
        local.append(spec)
    return replace(matrix, local=tuple(local))


@cache
def load_matrix(path: Path = MATRIX_FILE) -> dict[str, Any]:
    """The raw JSON (other modules read single keys from it)."""
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except OSError as exc:
        raise MatrixError(f"cannot read {path}: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise MatrixError(f"{path} is not valid JSON: {exc}") from exc
    return data


def load(path: Path = MATRIX_FILE) -> Matrix:
    """The validated matrix."""
    return parse_matrix(load_matrix(path))


def local_builds(path: Path = MATRIX_FILE) -> list[BuildSpec]:
    return list(load(path).local)


# -- expansion ----------------------------------------------------------------


def build_jobs(matrix: Matrix, mode: str = "torch", platforms: tuple[str, ...] | None = None) -> list[MatrixJob]:
    """CI jobs of ``mode``, in table order (torch, then variant, then platform)."""
    if mode not in MODES:
        raise MatrixError(f"unknown mode {mode!r} (expected {' or '.join(MODES)})")
    names = matrix.platform_names if platforms is None else platforms
    for name in names:
        matrix.platform(name)
    jobs: list[MatrixJob] = []
    if mode == "torch":
        for release in matrix.torch:
            pythons = tuple(py for py in release.python if py in matrix.python)
            if not pythons:
                continue
            for variant in release.variants:
                for plat in names:
                    jobs.append(MatrixJob("torch", release.version, variant, plat, pythons, (release.version,)))
        return jobs
    stable = matrix.stable_abi
    eligible = [r for r in matrix.torch if _version_key(r.major_minor) >= _version_key(stable.min_torch)]
    variants: list[str] = []
    for release in eligible:
        variants += [v for v in release.variants if v not in variants]
    for variant in variants:
        shipping = [r for r in eligible if variant in r.variants]
        build_torch = shipping[0]
        if stable.python not in build_torch.python:
            raise MatrixError(
                f"matrix.stable_abi.python: torch {build_torch.version} (the stable build torch of {variant}) "
                f"publishes no Python {stable.python} wheels"
            )
        tested = tuple(r.version for r in shipping)
        for plat in names:
            jobs.append(MatrixJob("stable", build_torch.version, variant, plat, (stable.python,), tested))
    return jobs


def select_jobs(jobs: list[MatrixJob], name: str | None = None, python: str | None = None) -> list[MatrixJob]:
    """Jobs whose name matches the glob ``name``, narrowed to ``python`` (jobs without it drop out)."""
    chosen = [job for job in jobs if name is None or fnmatch.fnmatchcase(job.name, name)]
    if python is not None:
        chosen = [replace(job, pythons=(python,)) for job in chosen if python in job.pythons]
    if not chosen:
        wanted = " and ".join(filter(None, (name and f"job {name!r}", python and f"Python {python}")))
        raise MatrixError(f"no build job matches {wanted}; `kiln matrix` lists them")
    return chosen


def arch_list(matrix: Matrix, cuda: str, platform: str) -> tuple[str, ...]:
    """TORCH_CUDA_ARCH_LIST entries for ``cuda`` on ``platform``: the newest also gets +PTX (as CMake reads it)."""
    archs = matrix.cuda_archs.get(cuda, {}).get(platform)
    if not archs:
        raise MatrixError(f"no CUDA arch list for CUDA {cuda} on {platform} in data/matrix.json")
    return (*archs[:-1], archs[-1] + "+PTX")


def github_entry(matrix: Matrix, job: MatrixJob) -> dict[str, str]:
    """One ``include`` entry of the GitHub Actions matrix; every value is a string."""
    cuda = job.cuda
    return {
        "name": job.name,
        "mode": job.mode,
        "torch": job.torch,
        "variant": job.variant,
        "platform": job.platform,
        "runner": matrix.platform(job.platform).runner,
        "python": " ".join(job.pythons),
        "build": " ".join(job.identifiers),
        "image": job.image,
        "kiln_variant": "cpu" if cuda is None else "cuda",
        "torch_index": matrix.index_url(job.variant),
        "cuda": cuda or "",
        "cuda_archs": "" if cuda is None else ";".join(arch_list(matrix, cuda, job.platform)),
        "test_torch": " ".join(job.test_torch),
        "floor": matrix.manylinux_floor,
    }


def github_matrix(matrix: Matrix, jobs: list[MatrixJob]) -> dict[str, list[dict[str, str]]]:
    return {"include": [github_entry(matrix, job) for job in jobs]}


def docker_build_args(matrix: Matrix, variant: str, platform: str) -> list[str]:
    """``docker build`` arguments of docker/Dockerfile for one variant and platform."""
    if not _VARIANT.match(variant):
        raise MatrixError(f"{variant!r} is not a variant (cpu, cu126, cu130, ...)")
    if not any(variant in r.variants for r in matrix.torch):
        raise MatrixError(f"variant {variant} is built for no torch in data/matrix.json")
    plat = matrix.platform(platform)
    cuda = cuda_version(variant)
    values = {
        "BASE_IMAGE": plat.manylinux_base,
        "CUDA_VERSION": cuda or "none",
        "CUDA_TOOLKIT": "none" if cuda is None else matrix.cuda_toolkits[cuda],
    }
    args: list[str] = []
    for key, value in values.items():
        args += ["--build-arg", f"{key}={value}"]
    return args


def build_counts(matrix: Matrix) -> dict[str, dict[str, int]]:
    """Jobs and wheels of each mode over the full matrix, per platform and in total."""
    counts: dict[str, dict[str, int]] = {}
    for mode in MODES:
        jobs = build_jobs(matrix, mode)
        row = {"jobs": len(jobs), "wheels": sum(len(j.pythons) for j in jobs)}
        for plat in matrix.platform_names:
            row[f"wheels_{plat}"] = sum(len(j.pythons) for j in jobs if j.platform == plat)
        counts[mode] = row
    return counts
