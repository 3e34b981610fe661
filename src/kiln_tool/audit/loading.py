"""How a library of a wheel is loaded, which decides how it is judged.

- by name at run time (`ctypes.CDLL`, `ctypes.cdll.LoadLibrary`, `dlopen`): a Python file of the wheel
  calls a loader and names the library, whole or by a prefix its code completes
  (f"libbitsandbytes_{backend}{version}.so"). Such a library is no extension module (no import, no
  PyInit_), and its unmangled exports are the C API its loader calls.
- one of a family of per-platform variants (`*_cu12.so` beside `*_cu13.so`, `*_cuda118.so` ...
  `*_cuda130.so`, `*_rocm64.so`): names alike but for a platform and version, one picked at run time.
  A CUDA variant is loaded only with a torch of its CUDA major (from its DT_NEEDED libcudart.so.N, else
  the version in its name); other variants (ROCm, XPU) never with a CUDA or CPU torch.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass

_LOADER_CALL = re.compile(rb"\b(?:CDLL|PyDLL|LoadLibrary|dlopen)\s*\(")
_LIB_LITERAL = re.compile(rb"lib[A-Za-z0-9_+.-]{2,}")
_VARIANT = re.compile(r"^(?P<stem>.+?)(?P<platform>cuda|cu|rocm|hip|xpu)(?P<version>\d+)"
                      r"(?P<rest>(?:\.abi3|\.cpython-[A-Za-z0-9_-]+)?\.so(?:\.\d+)*)$")
_CUDART = re.compile(r"^libcudart\.so\.(\d+)")


@dataclass(frozen=True)
class Variant:
    """One library of a per-platform family."""

    platform: str  # "cuda", "rocm", "xpu" (cu and cuda are both "cuda"; hip is "rocm")
    version: str  # as the name writes it: 118, 12, 130
    cuda_major: int | None  # for CUDA variants
    family: tuple[str, ...]  # every member of the family, this one included

    def describe(self) -> str:
        what = f"CUDA {self.cuda_major}" if self.cuda_major is not None else f"{self.platform} {self.version}"
        names = [posixpath.basename(m) for m in self.family]
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        return f"the {what} variant among {len(names)} per-platform libraries ({shown}), one picked at run time"


def loaded_by_name(python_files: dict[str, bytes], libraries: list[str]) -> dict[str, str]:
    """library member -> the Python file of the wheel that loads it by name (ctypes / dlopen)."""
    found: dict[str, str] = {}
    for source, text in sorted(python_files.items()):
        if not _LOADER_CALL.search(text):
            continue
        fragments = {f.decode().rstrip(".") for f in _LIB_LITERAL.findall(text)}
        for library in libraries:
            name = posixpath.basename(library)
            for fragment in fragments:
                if name == fragment or (name.startswith(fragment) and len(fragment) >= 6 and (
                        fragment[-1] in "_-" or name[len(fragment)] in "._-")):
                    found.setdefault(library, source)
                    break
    return found


def _cuda_major(platform: str, version: str, needed: list[str]) -> int | None:
    if platform != "cuda":
        return None
    for name in needed:
        match = _CUDART.match(name)
        if match:
            return int(match[1])
    return int(version[:2]) if len(version) >= 3 or int(version[:2]) >= 10 else int(version[0])


def variants(libraries: list[str], needed_of: Callable[[str], list[str]]) -> dict[str, Variant]:
    """library member -> its Variant, for the libraries that belong to a family of two or more."""
    families: dict[tuple[str, str, str], list[tuple[str, str, str]]] = {}
    for library in libraries:
        match = _VARIANT.match(posixpath.basename(library))
        if match is None:
            continue
        platform = {"cu": "cuda", "hip": "rocm"}.get(match["platform"], match["platform"])
        key = (posixpath.dirname(library), match["stem"], match["rest"])
        families.setdefault(key, []).append((library, platform, match["version"]))
    result: dict[str, Variant] = {}
    for members in families.values():
        if len(members) < 2:
            continue
        family = tuple(sorted(m[0] for m in members))
        for library, platform, version in members:
            result[library] = Variant(platform, version, _cuda_major(platform, version, needed_of(library)), family)
    return result
