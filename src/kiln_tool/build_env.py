"""Build environments: one venv per combination with the exact torch and the pinned toolchain.

A wheel is built against exactly one torch, without build isolation (isolation
would install the newest torch it may, GBs of the wrong one). Each combination
gets `<project>/.venvs/<spec.name>`: the exact torch, kiln's hash-locked toolchain (scikit-build-core,
cmake, ninja, ...) and, for a project built by its own backend, that backend's build requirements. A stamp
file records what was installed so an unchanged venv is reused and a changed pin rebuilds it. kiln itself
reaches the build through `<venv>/kiln-path` (a folder holding only kiln_tool) on PYTHONPATH.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path

from . import resources
from .matrix_data import BuildSpec
from .project import KilnProject, canonical_name, current_project
from .venvs import PIP_REQUIREMENTS, VenvError, ensure_venv, pinned

BUILD_LOCK = resources.requirements_path("build.lock")
STAMP = ".kiln-stamp"
# What a backend's build-system requires names that the build venv already has at kiln's choice: the exact
# torch of the combination, and kiln itself (on PYTHONPATH).
_PROVIDED = frozenset({"torch", resources.DISTRIBUTION})
_REQUIREMENT_NAME = re.compile(r"^\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(?:$|[\[<>=!~;@ ])")


class BuildEnvError(RuntimeError):
    pass


def find_python(version: str) -> Path:
    """A CPython `version` (e.g. 3.11) interpreter: PATH first, then pyenv."""
    candidates = [shutil.which(f"python{version}")]
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates += sorted((str(p) for p in (pyenv_root / "versions").glob(f"{version}.*/bin/python")), reverse=True)
    for candidate in candidates:
        if candidate and Path(candidate).exists():
            return Path(candidate)
    raise BuildEnvError(f"no Python {version} found on PATH or under {pyenv_root}/versions")


def backend_requirements(project: KilnProject) -> list[str]:
    """A backend build's [build-system] requires, less torch and kiln (the build venv has both)."""
    if project.build != "backend":
        return []
    kept = []
    for text in project.build_requires:
        match = _REQUIREMENT_NAME.match(text)
        if match is None:
            raise BuildEnvError(f"{project.root / 'pyproject.toml'}: [build-system] requires {text!r} is not a "
                                "requirement")
        if canonical_name(match.group(1)) not in _PROVIDED:
            kept.append(text)
    return kept


def _stamp_for(spec: BuildSpec, extra: list[str]) -> str:
    digest = hashlib.sha256()
    digest.update(spec.torch.encode() + b"\0" + BUILD_LOCK.read_bytes() + b"\0" + "\n".join(extra).encode())
    return digest.hexdigest()


def venv_path(spec: BuildSpec, project: KilnProject | None = None) -> Path:
    return (project or current_project()).root / ".venvs" / spec.name


def kiln_import_root(python: Path) -> Path:
    """A folder beside the build venv that holds only ``kiln_tool`` (a link to the kiln running now) and the
    torch-kiln distribution's metadata (its entry points: scikit-build-core finds kiln's metadata provider
    and CMake package through them), for the build's PYTHONPATH: the build reaches the kiln that drives it,
    and nothing else of the venv kiln runs in leaks into the build."""
    from . import __version__

    root = python.parent.parent / "kiln-path"
    root.mkdir(parents=True, exist_ok=True)
    link = root / "kiln_tool"
    target = resources.package_dir()
    if not (link.is_symlink() and link.resolve() == target):
        staged = root / ".kiln_tool.partial"
        staged.unlink(missing_ok=True)
        staged.symlink_to(target, target_is_directory=True)
        staged.replace(link)
    dist_info = root / f"{resources.DISTRIBUTION.replace('-', '_')}-{__version__}.dist-info"
    for old in root.glob("*.dist-info"):
        if old != dist_info:
            shutil.rmtree(old)
    dist_info.mkdir(exist_ok=True)
    entry_points = "".join(f"[{group}]\n" + "".join(f"{name} = {value}\n" for name, value in sorted(points.items()))
                           + "\n" for group, points in sorted(resources.ENTRY_POINTS.items()))
    for name, text in (("METADATA", f"Metadata-Version: 2.1\nName: {resources.DISTRIBUTION}\nVersion: {__version__}\n"),
                       ("entry_points.txt", entry_points)):
        if not (dist_info / name).is_file() or (dist_info / name).read_text() != text:
            (dist_info / f"{name}.partial").write_text(text)
            (dist_info / f"{name}.partial").replace(dist_info / name)
    return root


def ensure_build_env(spec: BuildSpec, log: Path, project: KilnProject | None = None) -> Path:
    """Create or update the build venv of `spec`; return its python.

    uv (kiln_tool.venvs) installs torch at the exact version and pip (at PIP_REQUIREMENTS'
    pin: the build is `pip wheel`) first, then the toolchain of BUILD_LOCK with
    --require-hashes. A venv whose stamp is stale is updated in place, not recreated.
    """
    project = project or current_project()
    venv = venv_path(spec, project)
    python = venv / "bin" / "python"
    stamp = venv / STAMP
    extra = backend_requirements(project)
    want = _stamp_for(spec, extra)
    if python.exists() and stamp.exists() and stamp.read_text().strip() == want:
        return python
    venv.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as fh:
        try:
            ensure_venv(venv, find_python(spec.python), packages=[f"torch=={spec.torch}",
                                                                  f"pip=={pinned('pip', PIP_REQUIREMENTS)}"], log=fh)
            ensure_venv(venv, python, requirements=[BUILD_LOCK], require_hashes=True, log=fh)
            if extra:
                ensure_venv(venv, python, packages=extra, log=fh)
        except VenvError as exc:
            raise BuildEnvError(str(exc)) from None
    stamp.write_text(want + "\n")
    return python
