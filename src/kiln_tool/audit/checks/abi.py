"""cxx11-abi: torch/c10/at symbols use the target torch's _GLIBCXX_USE_CXX11_ABI."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache

from ..context import LibraryContext
from ..report import CheckResult, failed, passed

_TORCH_NAMESPACES = re.compile(r"^_ZN?K?(?:St|N)?K?(?:3c10|2at|5torch|6caffe2)")
_MAYBE_STRING = re.compile(r"Ss|basic_string|St4list|cxx11")
_OLD_ABI = re.compile(r"(?<!__cxx11::)\b(?:std::string\b|std::basic_string<|std::list<|std::(?:i|o)?stringstream\b)")
_NEW_ABI = re.compile(r"std::__cxx11::|\[abi:cxx11\]")
_OLD_MANGLED = re.compile(r"(?<![0-9a-z_])Ss|St12basic_string|St4list")
_MAX_SHOWN = 5


@cache
def _demangler() -> Callable[[str], str | None] | None:
    import ctypes  # only a symbol that may name a string or list type is demangled
    import ctypes.util

    try:
        libstdcxx = ctypes.CDLL(ctypes.util.find_library("stdc++") or "libstdc++.so.6")
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    demangle = libstdcxx.__cxa_demangle
    demangle.restype = ctypes.c_void_p
    demangle.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    libc.free.argtypes = [ctypes.c_void_p]

    def run(name: str) -> str | None:
        status = ctypes.c_int()
        pointer = demangle(name.encode(), None, None, ctypes.byref(status))
        if not pointer or status.value != 0:
            return None
        try:
            return ctypes.string_at(pointer).decode(errors="replace")
        finally:
            libc.free(pointer)

    return run


def symbol_abi(name: str) -> int | None:
    """1 when the mangled name uses the C++11 string/list ABI, 0 for the old one, None when it has neither."""
    if not _MAYBE_STRING.search(name):
        return None
    demangle = _demangler()
    text = demangle(name) if demangle is not None else None
    if text is not None:
        if _NEW_ABI.search(text):
            return 1
        return 0 if _OLD_ABI.search(text) else None
    if "__cxx11" in name or "B5cxx11" in name:
        return 1
    return 0 if _OLD_MANGLED.search(name) else None


def check_cxx11_abi(ctx: LibraryContext, target_abi: bool | None, source: str) -> CheckResult:
    marked = [(symbol.name, abi) for symbol in ctx.lib.dynamic_symbols if _TORCH_NAMESPACES.match(symbol.name)
              and (abi := symbol_abi(symbol.name)) is not None]
    if not marked:
        # An old-ABI shim or a library without torch's C++ API: no torch symbol whose name the setting changes.
        return passed("cxx11-abi", "nothing to check: no torch symbol here whose mangling depends on "
                      "_GLIBCXX_USE_CXX11_ABI")
    if target_abi is None:
        return passed("cxx11-abi", f"not checked: the target torch's _GLIBCXX_USE_CXX11_ABI is unknown ({source})")
    want = 1 if target_abi else 0
    wrong = [name for name, abi in marked if abi != want]
    if wrong:
        shown = ", ".join(wrong[:_MAX_SHOWN]) + (f" and {len(wrong) - _MAX_SHOWN} more" if len(wrong) > _MAX_SHOWN
                                                  else "")
        return failed("cxx11-abi", f"{ctx.member}: {len(wrong)} torch symbol(s) use _GLIBCXX_USE_CXX11_ABI={1 - want} "
                      f"but the target torch uses {want} ({source}): {shown}. They will not resolve at import.",
                      f"compile with -D_GLIBCXX_USE_CXX11_ABI={want} (take it from "
                      "torch._C._GLIBCXX_USE_CXX11_ABI of the torch you build against), and do not mix objects "
                      "built for another torch.")
    return passed("cxx11-abi", f"{len(marked)} torch symbol(s) whose mangling depends on it use "
                  f"_GLIBCXX_USE_CXX11_ABI={want} ({source})")
