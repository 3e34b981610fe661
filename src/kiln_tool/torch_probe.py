"""Describe the torch installed in a Python environment without importing it.

Importing torch is slow and, for CUDA builds, needs the CUDA runtime wheels;
building only needs torch's headers, libraries and a few facts about how it
was compiled. Everything here is read from files on disk.

kiln_tool.build_config turns this into what CMake needs, which is how
CMakeLists.txt finds exactly one torch: the one beside the Python that builds.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path


class TorchNotFound(RuntimeError):
    pass


@dataclass(frozen=True)
class TorchInstall:
    root: str
    version: str
    """Full version, e.g. ``2.14.1+cu130`` or ``2.13.0+cpu``."""
    public_version: str
    """Version without the local part, e.g. ``2.14.1``."""
    major_minor: str
    cuda: str | None
    """CUDA version torch was built with (``13.0``) or None for a CPU build."""
    include_dirs: tuple[str, ...]
    lib_dir: str
    cxx11_abi: bool
    cxx_standard: int
    libraries: tuple[str, ...]

    @property
    def cuda_tag(self) -> str:
        return "cpu" if self.cuda is None else "cu" + self.cuda.replace(".", "")


def _read_version_module(path: Path) -> dict[str, object]:
    namespace: dict[str, object] = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)  # noqa: S102 - torch's own generated file
    return namespace


def _cxx11_abi(lib: Path) -> bool:
    """True when libc10 exports std::__cxx11 symbols (built with _GLIBCXX_USE_CXX11_ABI=1)."""
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    with lib.open("rb") as fh:
        elf = ELFFile(fh)
        dynsym = elf.get_section_by_name(".dynsym")
        if not isinstance(dynsym, SymbolTableSection):
            raise TorchNotFound(f"{lib} has no dynamic symbol table")
        for sym in dynsym.iter_symbols():
            if "__cxx11" in sym.name:
                return True
    return False


def _cxx_standard(root: Path) -> int:
    config = root / "share" / "cmake" / "Torch" / "TorchConfig.cmake"
    if config.is_file():
        match = re.search(r"CXX_STANDARD\s+(\d+)", config.read_text())
        if match:
            return int(match.group(1))
    return 17


def find_torch(search_path: list[str] | None = None) -> TorchInstall:
    if search_path is None:
        spec = importlib.util.find_spec("torch")
    else:
        spec = importlib.machinery.PathFinder.find_spec("torch", search_path)
    if spec is None or not spec.submodule_search_locations:
        raise TorchNotFound(
            f"torch is not installed for {sys.executable}. Install the exact torch the "
            "wheel targets first (e.g. `pip install torch==2.13.0`) and build with "
            "--no-build-isolation."
        )
    root = Path(next(iter(spec.submodule_search_locations))).resolve()
    version_file = root / "version.py"
    if not version_file.is_file():
        raise TorchNotFound(f"{root} has no version.py: a broken or source-tree torch")
    info = _read_version_module(version_file)
    version = str(info["__version__"])
    public = version.split("+", 1)[0]
    major, minor = public.split(".")[:2]
    cuda = info.get("cuda")
    lib_dir = root / "lib"
    c10 = lib_dir / "libc10.so"
    if not c10.is_file():
        raise TorchNotFound(f"{c10} is missing: torch at {root} has no C++ libraries")
    include = root / "include"
    return TorchInstall(
        root=str(root),
        version=version,
        public_version=public,
        major_minor=f"{major}.{minor}",
        cuda=str(cuda) if cuda else None,
        include_dirs=(str(include), str(include / "torch" / "csrc" / "api" / "include")),
        lib_dir=str(lib_dir),
        cxx11_abi=_cxx11_abi(c10),
        cxx_standard=_cxx_standard(root),
        libraries=tuple(sorted(p.name for p in lib_dir.glob("lib*.so"))),
    )
