"""Small sdists made on the spot for the index tests (imported as index.sdist_files).

A STAND-IN for `kiln sdist`'s output (tests/adopters/test_sdist.py builds and installs the real one): the layout
pip needs to build it (PKG-INFO, pyproject.toml with setuptools' backend, one module), tiny, so a test can build
it with `pip install --no-binary` in seconds. Knobs break each part the index checks.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

_MTIME = 1_767_225_600  # 2026-01-01: the same bytes on every run


def make_sdist(directory: Path, *, name: str = "opkiln", version: str = "0.1.0", filename: str | None = None,
               meta_name: str | None = None, meta_version: str | None = None, torch: str = "torch",
               note: str = "", extra: dict[str, bytes] | None = None, links: dict[str, str] | None = None) -> Path:
    """``<name>-<version>.tar.gz`` in ``directory`` (``filename`` overrides it); its members lie in the folder
    the file name says, unless ``extra`` names others; ``links`` adds symbolic links (member -> target)."""
    directory.mkdir(parents=True, exist_ok=True)
    filename = filename or f"{name.replace('-', '_')}-{version}.tar.gz"
    stem = filename.removesuffix(".tar.gz")
    pkg_info = (f"Metadata-Version: 2.1\nName: {meta_name or name}\nVersion: {meta_version or version}\n"
                f"Requires-Dist: {torch}\n\n")
    pyproject = ("[build-system]\nrequires = [\"setuptools>=61\"]\nbuild-backend = \"setuptools.build_meta\"\n\n"
                 f"[project]\nname = \"{meta_name or name}\"\nversion = \"{meta_version or version}\"\n\n"
                 "[tool.setuptools]\npy-modules = [\"kiln_sdist_standin\"]\n")
    files = {f"{stem}/PKG-INFO": pkg_info.encode(), f"{stem}/pyproject.toml": pyproject.encode(),
             f"{stem}/kiln_sdist_standin.py": f"BUILT_FROM = 'sdist'\nNOTE = {note!r}\n".encode(),
             **(extra or {})}
    path = directory / filename
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for member, data in sorted(files.items()):
            info = tarfile.TarInfo(member)
            info.size, info.mtime, info.mode = len(data), _MTIME, 0o644
            tar.addfile(info, io.BytesIO(data))
        for member, target in sorted((links or {}).items()):
            info = tarfile.TarInfo(member)
            info.type, info.linkname, info.mtime = tarfile.SYMTYPE, target, _MTIME
            tar.addfile(info)
    return path
