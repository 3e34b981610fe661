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
from typing import NamedTuple

_LOADER_CALL = re.compile(rb"\b(?:CDLL|PyDLL|LoadLibrary|dlopen)\s*\(|\bLD_PRELOAD\b")
# The text a string literal starts with (an f-string's up to its first {}), at least 6 characters.
_LITERAL = re.compile(rb"[\"']([A-Za-z_][A-Za-z0-9_+.-]{5,})")
_VARIANT = re.compile(r"^(?P<stem>.+?)(?P<platform>cuda|cu|rocm|hip|xpu)(?P<version>\d+)"
                      r"(?P<rest>(?:\.abi3|\.cpython-[A-Za-z0-9_-]+)?\.so(?:\.\d+)*)$")
# libcudart.so.13, and the names auditwheel grafts it under (libcudart-1a2b3c4d.so.13.0.96; older
# tools wrote libcudart.1a2b3c4d.so.12): the CUDA major is the first number after ".so".
CUDART = re.compile(r"^libcudart(?:[.-][0-9a-f]{8})?\.so\.(\d+)")


class Variant(NamedTuple):
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
    """library member -> the Python file of the wheel that names it, when the wheel's Python loads
    libraries by name (ctypes.CDLL, dlopen, LD_PRELOAD) somewhere: the call and the name are often in
    different modules (a loader helper, and each caller's library stem)."""
    found: dict[str, str] = {}
    if not any(_LOADER_CALL.search(text) for text in python_files.values()):
        return found
    best: dict[str, int] = {}  # the file naming the library most precisely (the longest matching literal) wins
    for source, text in sorted(python_files.items()):
        fragments = {f.decode().rstrip(".") for f in _LITERAL.findall(text)}
        for library in libraries:
            name = posixpath.basename(library)
            for fragment in fragments:
                names_it = name == fragment or (name.startswith(fragment) and (
                    fragment[-1] in "_-" or name[len(fragment)] in "._-"))
                if names_it and len(fragment) > best.get(library, 0):
                    best[library] = len(fragment)
                    found[library] = source
    return found


def _cuda_major(platform: str, version: str, needed: list[str]) -> int | None:
    if platform != "cuda":
        return None
    for name in needed:
        match = CUDART.match(name)
        if match:
            return int(match[1])
    if not version.strip("0"):
        return None
    return int(version[:2]) if len(version) >= 3 or int(version[:2]) >= 10 else int(version[0])


def _stem_rest(library: str) -> tuple[str, str]:
    match = _VARIANT.match(posixpath.basename(library))
    assert match is not None
    return match["stem"], match["rest"]


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
        # The unsuffixed name beside them (<stem>.abi3.so next to <stem>_cu12.abi3.so): the default build,
        # one of the family too; its CUDA major (if any) is the one its NEEDED libcudart names.
        directory, stem, rest = next((posixpath.dirname(m[0]), *_stem_rest(m[0])) for m in members)
        plain = posixpath.join(directory, stem.rstrip("_-") + rest)
        if plain in libraries:
            major = _cuda_major("cuda", "0", needed_of(plain))
            members.append((plain, "cuda" if major else "default", ""))
        family = tuple(sorted(m[0] for m in members))
        for library, platform, version in members:
            result[library] = Variant(platform, version, _cuda_major(platform, version, needed_of(library)), family)
    return result


# A string literal of Python code (quotes of either kind), at least 3 characters of a C identifier or a path.
_ANY_LITERAL = re.compile(rb"[\"']([A-Za-z_./-][A-Za-z0-9_./+-]{2,})[\"']")
_HEADER = re.compile(r"\.(h|hh|hpp|hxx|cuh|inl)$", re.IGNORECASE)
_LINK_FILE = re.compile(r"(\.py|\.cmake|\.pc|CMakeLists\.txt)$")
_LINK_CONTEXT = re.compile(rb"library_dirs|libraries\s*=|extra_link_args|cpp_extension|target_link_libraries|"
                           rb"find_library|IMPORTED_LOCATION|Libs:")
_GENERIC_DIRS = frozenset({"lib", "lib64", "libs", "bin", "include", "share", "src", "_C", "csrc", "data"})


class ApiEvidence(NamedTuple):
    """What in a wheel says a library's exports are an API, not a leak."""

    literals: dict[str, str]  # string literal of the wheel's Python code -> the file holding it
    headers: tuple[str, ...]  # C/C++ headers the wheel ships
    link_files: dict[str, bytes]  # Python / CMake / pkg-config files that link code against libraries

    def named_in_python(self, symbols: list[str]) -> dict[str, str]:
        """Exported symbols Python code names (looked up by name: dlsym, ctypes, a pluggable allocator)."""
        return {s: self.literals[s] for s in symbols if s in self.literals}

    def sdk(self, member: str) -> str | None:
        """Why `member` is a public SDK library: the wheel ships headers and a build helper links against it."""
        if not self.headers:
            return None
        name = posixpath.basename(member)
        link = re.sub(r"^lib|\.so(\.\d+)*$", "", name)
        for file, text in sorted(self.link_files.items()):
            if not _LINK_CONTEXT.search(text):
                continue
            if name.encode() in text or f"-l{link}".encode() in text or (
                    len(link) >= 3 and re.search(rb"[\"']" + re.escape(link.encode()) + rb"[\"']", text)):
                return (f"the wheel ships {len(self.headers)} header(s) (e.g. {self.headers[0]}) and {file} links "
                        f"code against {name}")
        return None

    def runtime_dir(self, member: str) -> str | None:
        """The Python file naming the folder `member` lives in (a vendor runtime loaded from that folder)."""
        folder = posixpath.dirname(member)
        last = posixpath.basename(folder)
        if not folder or last in _GENERIC_DIRS or len(last) < 4:
            return None
        for literal, file in self.literals.items():
            if literal.rstrip("/") in (folder, last) or literal.rstrip("/").endswith("/" + folder):
                return file
        return None


def api_evidence(members: dict[str, bytes], names: list[str]) -> ApiEvidence:
    """`members`: the wheel's Python, CMake and pkg-config files' bytes; `names`: every member's name."""
    literals: dict[str, str] = {}
    for file, text in sorted(members.items()):
        if file.endswith(".py"):
            for literal in _ANY_LITERAL.findall(text):
                literals.setdefault(literal.decode(), file)
    headers = tuple(sorted(n for n in names if _HEADER.search(n)))
    link_files = {f: t for f, t in members.items() if _LINK_FILE.search(f)}
    return ApiEvidence(literals, headers, link_files)
