"""Build environments: one venv per combination with the exact torch and the pinned toolchain.

A wheel is built against exactly one torch, without build isolation (isolation
would install the newest torch it may, GBs of the wrong one). Each combination
gets `.venvs/<spec.name>`; a stamp file records what was installed so an
unchanged venv is reused and a changed pin rebuilds it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import IO

from .matrix_data import BuildSpec

REPO_ROOT = Path(__file__).resolve().parents[2]
VENVS = REPO_ROOT / ".venvs"
BUILD_LOCK = REPO_ROOT / "requirements" / "build.lock"


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


def _stamp_for(spec: BuildSpec) -> str:
    digest = hashlib.sha256()
    digest.update(spec.torch.encode() + b"\0" + BUILD_LOCK.read_bytes())
    return digest.hexdigest()


def venv_path(spec: BuildSpec) -> Path:
    return VENVS / spec.name


def ensure_build_env(spec: BuildSpec, log: Path) -> Path:
    """Create or update the build venv of `spec`; return its python.

    The toolchain comes from requirements/build.lock, installed with
    --require-hashes; torch is installed first, on its own, at the exact version.
    A venv whose stamp is stale is updated in place, not recreated.
    """
    venv = venv_path(spec)
    python = venv / "bin" / "python"
    stamp = venv / ".opkiln-stamp"
    want = _stamp_for(spec)
    if python.exists() and stamp.exists() and stamp.read_text().strip() == want:
        return python
    with log.open("a") as fh:
        if not python.exists():
            if venv.exists():
                shutil.rmtree(venv)
            venv.parent.mkdir(parents=True, exist_ok=True)
            _run([str(find_python(spec.python)), "-m", "venv", str(venv)], fh)
        _run([str(python), "-m", "pip", "install", "--quiet", f"torch=={spec.torch}"], fh)
        _run([str(python), "-m", "pip", "install", "--quiet", "--require-hashes", "-r", str(BUILD_LOCK)], fh)
    stamp.write_text(want + "\n")
    return python


def _run(cmd: list[str], log: IO[str]) -> None:
    proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise BuildEnvError(f"`{' '.join(cmd)}` failed (exit {proc.returncode}); see the log")
