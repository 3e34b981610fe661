"""A kiln-guarded package made in a temporary site folder from this checkout's guard (src/kiln_tool/guard), the way
a wheel carries it (``<package>/_kiln/``), with a dist-info whose RECORD lists its files: small enough to make per
test, and imported in-process (its ``__init__`` does not load anything) or run in a subprocess."""

from __future__ import annotations

import base64
import hashlib
import importlib
import itertools
import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

GUARD_SOURCES = Path(os.environ.get("KILN_TEST_GUARD_SOURCES")
                     or Path(__file__).resolve().parents[2] / "src" / "kiln_tool" / "guard")
"""This checkout's guard; KILN_TEST_GUARD_SOURCES points at another one (to show a test fails on an older guard)."""
_names = itertools.count()


def environment_info(**fields: Any) -> dict[str, Any]:
    """A build info that matches this interpreter and the dev venv's torch, plus ``fields``."""
    import torch

    version = str(torch.__version__)
    info: dict[str, Any] = {
        "schema": 1, "build": "kiln", "abi_mode": "torch", "version": "0.1.0", "libraries": "python-module",
        "torch_version": version, "torch_major_minor": ".".join(version.split("+")[0].split(".")[:2]),
        "cuda": torch.version.cuda, "cuda_tag": "cpu" if not torch.version.cuda else None, "cuda_archs": [],
        "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),
        "python_tag": f"cp{sys.version_info.major}{sys.version_info.minor}", "platform": sys.platform,
        "ops": [], "index_url": "https://wheels.example.org/guarded",
    }
    info.update(fields)
    return info


def _record_line(root: Path, path: Path) -> str:
    data = path.read_bytes()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path.relative_to(root).as_posix()},sha256={digest},{len(data)}"


@dataclass
class GuardedPackage:
    name: str
    dist: str
    site: Path

    @property
    def folder(self) -> Path:
        return self.site / self.name

    @property
    def build_info_file(self) -> Path:
        return self.folder / "_build_info.json"

    def write_info(self, info: Any) -> None:
        self.build_info_file.write_bytes(info if isinstance(info, bytes) else json.dumps(info).encode())
        self.forget()

    def module(self, name: str) -> ModuleType:
        if str(self.site) not in sys.path:
            sys.path.insert(0, str(self.site))
        return importlib.import_module(f"{self.name}._kiln.{name}")

    def forget(self) -> None:
        """Drop the cached build info so the next read sees the file as it is now."""
        loaded = sys.modules.get(f"{self.name}._kiln.buildinfo")
        if loaded is not None:
            loaded._load.cache_clear()

    def add_to_record(self, *paths: Path) -> None:
        record = next(self.site.glob(f"{self.dist.replace('-', '_')}-*.dist-info")) / "RECORD"
        with record.open("a") as stream:
            stream.writelines(_record_line(self.site, p) + "\n" for p in paths)


def make_package(site: Path, info: Any, name: str | None = None, dist: str | None = None) -> GuardedPackage:
    """``name`` (a fresh import name by default) in ``site`` with this checkout's guard and ``info`` as its build
    info; a ``<dist>-0.1.0.dist-info`` lists every file in its RECORD."""
    name = name or f"guarded{next(_names)}_{abs(hash(site)) % 10**6}"
    dist = dist or name
    folder = site / name
    (folder / "_kiln").mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    for source in sorted(GUARD_SOURCES.glob("*.py")):
        shutil.copy2(source, folder / "_kiln" / source.name)
    package = GuardedPackage(name, dist, site)
    package.write_info(info)
    dist_info = site / f"{dist.replace('-', '_')}-0.1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1.0\n")
    files = [*sorted(p for p in folder.rglob("*") if p.is_file()), dist_info / "METADATA"]
    (dist_info / "RECORD").write_text("".join(_record_line(site, p) + "\n" for p in files)
                                      + f"{dist_info.name}/RECORD,,\n")
    return package
