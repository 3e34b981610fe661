"""Virtual environments made with uv: the repo venv (.venv) and the build venvs (.venvs/).

uv (pinned with hashes in kiln's data/requirements/uv.txt) is installed once into ~/.cache/kiln/uv/
($KILN_UV_HOME) by the
Python that runs kiln (`pip install --target`); it creates a venv in well under a second
and installs torch in seconds where pip takes minutes, and a second venv from its cache in
about one. uv does not read pip's configuration, so the package sources pip is configured
with here (`pip config list`: index-url, extra-index-url, find-links, constraint, no-index,
cert; files and PIP_* variables alike) are handed to uv as its own options, and uv picks the
best match over all of them, as pip does. Every venv gets pip too (pinned in its requirement
files): the build runs `pip wheel --no-build-isolation`, and users' commands name pip.

A venv records what it was given (`.kiln-requirements`: each requirement file reached,
nested -r/-c included, with its sha256); asking again for files it holds unchanged is a
no-op, so `make wheels` and `make test` call this every time. Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from . import resources

UV_REQUIREMENTS = resources.requirements_path("uv.txt")
PIP_REQUIREMENTS = resources.requirements_path("pip.txt")  # the pip every venv kiln makes for a build gets
# One uv per user, not per checkout: kiln installed from its wheel has no checkout to put it in.
UV_HOME = Path(os.environ.get("KILN_UV_HOME") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
               / "kiln" / "uv")
STAMP = ".kiln-requirements"

# pip settings uv has an option for; the value of each is what pip itself would use.
_PIP_SOURCES = ("index-url", "extra-index-url", "find-links", "constraint", "no-index", "cert")
_NESTED = re.compile(r"^\s*(-r|-c|--requirement|--constraint)\s*=?\s*(\S+)")


class VenvError(RuntimeError):
    pass


def pinned(name: str, requirements: Path) -> str:
    """The version `requirements` pins `name` to (a `name==VERSION` line)."""
    for line in requirements.read_text(encoding="utf-8").splitlines():
        match = re.match(rf"^{re.escape(name)}==([\w.+]+)", line.strip())
        if match:
            return match.group(1)
    raise VenvError(f"{requirements} pins no {name}==VERSION")


def ensure_uv(log: IO[str] | None = None) -> Path:
    """The pinned uv, installed into UV_HOME (from UV_REQUIREMENTS, hashes required) if missing."""

    uv = UV_HOME / "bin" / "uv"
    want = pinned("uv", UV_REQUIREMENTS)
    if uv.exists():
        found = subprocess.run([str(uv), "--version"], capture_output=True, text=True, check=False).stdout.split()
        if found[1:2] == [want]:
            return uv
    shutil.rmtree(UV_HOME, ignore_errors=True)
    _run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
          "--require-hashes", "--target", str(UV_HOME), "-r", str(UV_REQUIREMENTS)], log)
    if not uv.exists():
        raise VenvError(f"installing {UV_REQUIREMENTS} into {UV_HOME} left no bin/uv")
    return uv


def pip_sources(config_list: str) -> dict[str, str]:
    """pip's package-source settings from `pip config list` output (`section.key='value'` lines).
    A PIP_* variable (`:env:.key`) beats the [install] section, which beats [global], as in pip."""
    rank = {":env:": 0, "install": 1, "global": 2}
    found: dict[str, tuple[int, str]] = {}
    for line in config_list.splitlines():
        match = re.match(r"^(:env:|[\w-]+)\.([\w-]+)='(.*)'$", line.strip())
        if not match or match.group(1) not in rank or match.group(2) not in _PIP_SOURCES:
            continue
        section, key, value = match.groups()
        if key not in found or rank[section] < found[key][0]:
            found[key] = (rank[section], value)
    return {key: value for key, (_, value) in found.items()}


def uv_source_args(sources: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """uv options and environment for pip's package sources."""
    args = ["--index-strategy", "unsafe-best-match"]  # pip's rule: the best version over every index
    env: dict[str, str] = {}
    if "index-url" in sources:
        args += ["--index-url", sources["index-url"]]
    for url in sources.get("extra-index-url", "").split():
        args += ["--extra-index-url", url]
    for link in sources.get("find-links", "").split():
        args += ["--find-links", link]
    for constraint in sources.get("constraint", "").split():
        args += ["--constraint", constraint]
    if sources.get("no-index", "").lower() in ("1", "true", "yes", "on"):
        args.append("--no-index")
    if sources.get("cert"):
        env["SSL_CERT_FILE"] = sources["cert"]
    return args, env


def _without_constraints(args: list[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg == "--constraint":
            skip = True
        else:
            out.append(arg)
    return out


def _pip_config(python: Path) -> dict[str, str]:
    proc = subprocess.run([str(python), "-m", "pip", "config", "list"], capture_output=True, text=True, check=False)
    return pip_sources(proc.stdout) if proc.returncode == 0 else {}


def requirement_files(files: Sequence[Path]) -> dict[str, str]:
    """Each requirement file `files` reach (nested -r/-c too) -> its sha256."""
    digests: dict[str, str] = {}
    todo = [f.resolve() for f in files]
    while todo:
        path = todo.pop()
        if str(path) in digests:
            continue
        if not path.is_file():
            raise VenvError(f"requirement file {path} does not exist")
        text = path.read_text(encoding="utf-8")
        digests[str(path)] = hashlib.sha256(text.encode()).hexdigest()
        for line in text.splitlines():
            match = _NESTED.match(line)
            if match:
                todo.append((path.parent / match.group(2)).resolve())
    return digests


def _recorded(venv: Path) -> dict[str, str]:
    try:
        data = json.loads((venv / STAMP).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def holds(venv: Path, files: Sequence[Path]) -> bool:
    """`venv` was given `files` (and what they include) as they are now."""
    if not (venv / "bin" / "python").exists():
        return False
    recorded = _recorded(venv)
    return all(recorded.get(name) == digest for name, digest in requirement_files(files).items())


def ensure_venv(venv: Path, python: Path, requirements: Sequence[Path] = (), packages: Sequence[str] = (),
                require_hashes: bool = False, log: IO[str] | None = None) -> Path:
    """Create `venv` (with `python`) if needed and install `packages`, then each requirement file; returns
    its python. Files it already holds unchanged are skipped; an existing venv is updated in place."""
    venv_python = venv / "bin" / "python"
    if requirements and not packages and holds(venv, requirements):
        return venv_python
    uv = ensure_uv(log)
    sources, env = uv_source_args(_pip_config(python))
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never", **env}
    if not venv_python.exists():
        if venv.is_symlink():
            venv.unlink()
        elif venv.exists():
            shutil.rmtree(venv)
        _run([str(uv), "venv", "--quiet", "--python", str(python), str(venv)], log, env)
    install = [str(uv), "pip", "install", "--quiet", "--python", str(venv_python), *sources]
    if packages:
        _run([*install, *packages], log, env)
    # A hash-locked file pins every version itself; uv would read pip's constraints as unhashed requirements.
    locked = [str(uv), "pip", "install", "--quiet", "--python", str(venv_python), *_without_constraints(sources),
              "--require-hashes"]
    for path in requirements:
        _run([*(locked if require_hashes else install), "-r", str(path)], log, env)
    if requirements:
        recorded = _recorded(venv)
        recorded.update(requirement_files(requirements))
        # Replaced, not rewritten: a hard-linked copy of the venv must not change the original's record.
        partial = venv / f"{STAMP}.partial"
        partial.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
        partial.replace(venv / STAMP)
    return venv_python


def _run(cmd: list[str], log: IO[str] | None, env: dict[str, str] | None = None) -> None:
    if log is not None:
        log.write(f"$ {shlex.join(cmd)}\n")
        log.flush()
    proc = subprocess.run(cmd, stdout=log if log is not None else subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, env=env, check=False)
    if proc.returncode != 0:
        detail = "; see the log" if log is not None else ":\n" + (proc.stdout or "").strip()[-3000:]
        raise VenvError(f"`{shlex.join(cmd)}` failed (exit {proc.returncode}){detail}")
