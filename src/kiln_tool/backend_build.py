"""What kiln gives a build by the project's own setuptools backend (``build = "backend"``), beyond the prefix
maps: a fresh build folder and a hardened link, both through setuptools' own configuration channels, so the
adopter's setup.py stays as it is.

- A fresh build folder per build: setuptools reuses an in-tree ``build/`` and relinks nothing when only a flag
  changed. kiln points setuptools at ``<build dir>/backend/`` (``DIST_EXTRA_CONFIG``, a config file setuptools
  reads after setup.cfg: ``[build] build_base``, ``[build_ext] force``) and empties that folder before each
  build; kiln's logs (``build/logs/``) and the adopter's own ``build/`` are never touched.
- A hardened link (``LDFLAGS``, which setuptools adds to every link line, as the prefix maps go through
  ``CPPFLAGS``): a version script generated for the library's kind (``load-library``: nothing exported;
  ``python-module``: ``PyInit_*`` only) and ``--exclude-libs,ALL``. A project that passes its own version script
  keeps it (two version scripts cannot be combined: ld refuses "anonymous version tag cannot be combined").
  The audit still judges the result.

Standard library only.
"""

from __future__ import annotations

import ast
import configparser
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .project import KilnProject

VERSION_SCRIPTS = {
    "load-library": "{\n  local: *;\n};\n",
    "python-module": "{\n  global: PyInit_*;\n  local: *;\n};\n",
}
"""The version script of each library kind: what torch.ops.load_library needs exported (nothing: the static
registrations run at load) and what an import needs (the module's init function)."""

OWN_VERSION_SCRIPT = ("version-script", "version_script")
"""How a setup.py or setup.cfg that passes its own version script spells it."""

MAX_SETUP_BYTES = 1 << 20


@dataclass(frozen=True)
class BackendBuild:
    """The folder of one backend build and the environment that points setuptools at it."""

    folder: Path
    env: dict[str, str]
    own_version_script: bool


def _setup_texts(root: Path) -> list[str]:
    texts = []
    for name in ("setup.py", "setup.cfg"):
        path = root / name
        try:
            with path.open("rb") as fh:
                texts.append(fh.read(MAX_SETUP_BYTES).decode("utf-8", errors="replace"))
        except OSError:
            continue
    return texts


def passes_own_version_script(root: Path) -> bool:
    """Whether the project's setup.py or setup.cfg passes a version script of its own."""
    return any(word in text for text in _setup_texts(root) for word in OWN_VERSION_SCRIPT)


def prepare(project: KilnProject, build_dir: Path, env: dict[str, str], fresh: bool = True) -> BackendBuild:
    """Empty ``<build_dir>/backend/`` (``fresh``; kiln develop keeps it, for ninja's incremental rebuild) and
    write there setuptools' extra configuration and the version script; return the environment entries that make
    a setuptools build use them (CPPFLAGS gets a prefix map of the folder, LDFLAGS the hardened link)."""
    folder = build_dir / "backend"
    if folder.is_symlink() or folder.is_file():
        folder.unlink()
    if fresh:
        shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    config = configparser.ConfigParser()
    config["build"] = {"build_base": str(folder / "build")}
    config["build_ext"] = {"force": "1"}
    with (folder / "kiln-setuptools.cfg").open("w") as fh:
        config.write(fh)
    extra = {
        "DIST_EXTRA_CONFIG": str(folder / "kiln-setuptools.cfg"),
        # After the project's own map (gcc takes the last that matches): the same bytes whichever build folder.
        "CPPFLAGS": " ".join([env.get("CPPFLAGS", ""), f"-ffile-prefix-map={folder}/=kiln-build/"]).strip(),
    }
    own = passes_own_version_script(project.root)
    link = ["-Wl,--exclude-libs,ALL"]
    if not own:
        script = folder / f"kiln-{project.libraries}.map"
        script.write_text(VERSION_SCRIPTS[project.libraries])
        link.insert(0, f"-Wl,--version-script={script}")
    extra["LDFLAGS"] = " ".join([env.get("LDFLAGS", ""), *link]).strip()
    return BackendBuild(folder=folder, env=extra, own_version_script=own)


def setup_name(root: Path) -> str | None:
    """The distribution name a setuptools project gives its backend where it has no ``[project]`` table:
    ``[metadata] name`` of setup.cfg, else a literal ``name="..."`` of the ``setup(...)`` call in setup.py
    (read, not run: the name is needed where the build venv's torch is not). None when neither says."""
    cfg = root / "setup.cfg"
    if cfg.is_file():
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read_string(cfg.read_bytes()[:MAX_SETUP_BYTES].decode("utf-8", errors="replace"))
        except (configparser.Error, OSError):
            pass
        else:
            name = parser.get("metadata", "name", fallback=None)
            if name and name.strip():
                return name.strip()
    try:
        tree = ast.parse((root / "setup.py").read_bytes()[:MAX_SETUP_BYTES])
    except (OSError, SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if called != "setup":
            continue
        for keyword in node.keywords:
            if keyword.arg == "name" and isinstance(keyword.value, ast.Constant) \
                    and isinstance(keyword.value.value, str):
                return keyword.value.value
    return None


__all__ = ["VERSION_SCRIPTS", "BackendBuild", "passes_own_version_script", "prepare", "setup_name"]
