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
from pathlib import Path

from .matrix_data import BuildSpec
from .venvs import KILN_REQUIREMENTS, VenvError, ensure_venv, pinned

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

    uv (kiln_tool.venvs) installs torch at the exact version and pip (at requirements/kiln.txt's
    pin: the build is `pip wheel`) first, then the toolchain of requirements/build.lock with
    --require-hashes. A venv whose stamp is stale is updated in place, not recreated.
    """
    venv = venv_path(spec)
    python = venv / "bin" / "python"
    stamp = venv / ".opkiln-stamp"
    want = _stamp_for(spec)
    if python.exists() and stamp.exists() and stamp.read_text().strip() == want:
        return python
    venv.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as fh:
        try:
            ensure_venv(venv, find_python(spec.python), packages=[f"torch=={spec.torch}",
                                                                  f"pip=={pinned('pip', KILN_REQUIREMENTS)}"], log=fh)
            ensure_venv(venv, python, requirements=[BUILD_LOCK], require_hashes=True, log=fh)
        except VenvError as exc:
            raise BuildEnvError(str(exc)) from None
    stamp.write_text(want + "\n")
    return python
