"""A wheel's declared dependencies where the audit runs: which are not installed (a needed library none of the
wheel's, torch's or the platform's may then be theirs: unknown, not missing), and, behind
`kiln audit --fetch-dependencies`, their wheels downloaded (`pip download --no-deps`) and their file lists read,
so that whether one ships the library, and where it installs it, is known instead."""

from __future__ import annotations

import posixpath
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import AuditInputError

# name-1.0.data/platlib/x and .../purelib/x install to site-packages/x; other .data folders (scripts, headers,
# data) install outside it, where no RUNPATH of a package's library points.
_DATA_LIB = re.compile(r"^[^/]+\.data/(?:platlib|purelib)/")


@dataclass(frozen=True)
class ShippedFile:
    dependency: str  # "name version (Requires-Dist: text)"
    path: str  # where it installs, relative to site-packages


def applicable(requires: tuple[str, ...], arch: str) -> list[tuple[str, str]]:
    """(canonical name, Requires-Dist text) of the declared dependencies a plain install of the wheel on Linux
    `arch` pulls in: not torch, not an extra's, markers evaluated for that platform."""
    from packaging.markers import UndefinedComparison, UndefinedEnvironmentName
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    environment = {"platform_machine": arch, "sys_platform": "linux", "platform_system": "Linux",
                   "os_name": "posix", "extra": ""}
    declared: list[tuple[str, str]] = []
    for text in requires:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        name = canonicalize_name(requirement.name)
        if name == "torch":
            continue
        if requirement.marker is not None:
            if "extra" in str(requirement.marker):
                continue
            try:
                if not requirement.marker.evaluate(environment):
                    continue
            except (UndefinedComparison, UndefinedEnvironmentName):
                pass  # a marker this audit cannot judge: the dependency may be installed with the wheel
        declared.append((name, text))
    return declared


def installed_distributions(site: Path | None) -> dict[str, Any]:
    """Canonical name -> distribution, installed where the audit runs: the target torch's site-packages first,
    then the running interpreter's own (kiln's environment), whose file lists are as much evidence."""
    from importlib.metadata import distributions

    from packaging.utils import canonicalize_name

    found: dict[str, Any] = {}
    for where in ([str(site)] if site is not None else []), sys.path:
        for dist in distributions(path=list(where)):
            found.setdefault(canonicalize_name(distribution_name(dist)), dist)
    return found


def distribution_name(dist: Any) -> str:
    """dist.metadata["Name"] (or ""), from the metadata's header block alone: the whole text through the email
    parser, long descriptions included, cost 0.2 s for an environment of 135 distributions."""
    from email.parser import HeaderParser

    # The files importlib.metadata reads for .metadata, in its order.
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or dist.read_text("") or ""
    # Headers end at the first empty line; what follows cannot change them.
    return str(HeaderParser().parsestr(text.split("\n\n", 1)[0]).get("Name") or "")


def uninstalled(requires: tuple[str, ...], arch: str, site: Path | None,
                installed: Callable[[], dict[str, Any]] | None = None) -> list[str]:
    """The Requires-Dist texts of applicable() dependencies installed nowhere the audit runs (neither beside the
    target torch nor in kiln's own environment): nothing says which files they ship."""
    declared = applicable(requires, arch)
    if not declared:
        return []  # nothing to look for: the installed distributions are not read
    found = installed() if installed is not None else installed_distributions(site)
    return [text for name, text in declared if name not in found]


def _pip_platforms(arch: str, wheel_tags: list[str]) -> list[str]:
    glibc = [tuple(int(p) for p in m.groups()) for t in wheel_tags if (m := re.search(r"manylinux_(\d+)_(\d+)", t))]
    major, minor = max(glibc) if glibc else (2, 39)
    # pip extends a manylinux_X_Y platform to the older manylinux tags itself; linux_<arch> wheels too.
    return [f"manylinux_{major}_{minor}_{arch}", f"linux_{arch}"]


def fetch(texts: list[str], arch: str, python_tag: str | None, wheel_tags: list[str]) -> dict[str, ShippedFile]:
    """Download each dependency's wheel for this platform (pip download --no-deps --only-binary=:all:) and map
    every file name it installs into site-packages to where it goes. A dependency pip cannot download is an
    AuditInputError naming it (the check was asked for: it is never skipped silently)."""
    shipped: dict[str, ShippedFile] = {}
    with tempfile.TemporaryDirectory(prefix="kiln-audit-deps-") as tmp:
        for text in texts:
            dest = Path(tmp) / str(len(list(Path(tmp).iterdir())))
            command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                       "--dest", str(dest)]
            for platform in _pip_platforms(arch, wheel_tags):
                command += ["--platform", platform]
            if python_tag and re.fullmatch(r"cp3\d+", python_tag):
                command += ["--python-version", f"3.{python_tag[3:]}"]
            proc = subprocess.run([*command, text.split(";")[0].strip()], capture_output=True, text=True)
            wheels = sorted(dest.glob("*.whl")) if dest.is_dir() else []
            if proc.returncode != 0 or not wheels:
                last = (proc.stderr.strip().splitlines() or ["no wheel downloaded"])[-1]
                raise AuditInputError(f"--fetch-dependencies: pip download --no-deps {text!r} failed: {last}")
            for wheel in wheels:
                parts = wheel.name[:-4].split("-")
                label = f"{parts[0]} {parts[1] if len(parts) > 1 else '?'} (Requires-Dist: {text})"
                with zipfile.ZipFile(wheel) as archive:
                    for name in archive.namelist():
                        if name.endswith("/"):
                            continue
                        installed = _DATA_LIB.sub("", name)
                        if installed == name and name.split("/", 1)[0].endswith(".data"):
                            continue
                        shipped.setdefault(posixpath.basename(installed), ShippedFile(label, installed))
    return shipped
