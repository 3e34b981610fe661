"""The dynamic symbols unpacked straight from the mapped file are exactly what pyelftools reads, entry by
entry (names, binding, type, visibility, versions, hidden versions), on the corpus built here and on
torch's own libraries."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from audit_corpus import Corpus

from kiln_tool.audit.elf import ElfLibrary

TORCH_LIB = Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages" \
    / "torch" / "lib"
CORPUS_LIBS = ["libplain.so", "libnewabi.so", "liboldabi.so", "sub/libdepv.so", "libneedsver.so", "libnewglibc.so",
               "libregister.so", "libf32.so"]


def _both(path: Path) -> tuple[object, object]:
    lib = ElfLibrary.open(path)
    try:
        assert lib._dynsym is not None
        unpacked = lib._unpacked_dynamic_symbols()
        parsed = [lib._symbol(i, s) for i, s in enumerate(lib._dynsym.iter_symbols()) if s.name]
    finally:
        lib.close()
    return unpacked, parsed


@pytest.mark.parametrize("name", CORPUS_LIBS)
def test_unpacked_symbols_are_pyelftools_symbols(corpus: Corpus, name: str) -> None:
    unpacked, parsed = _both(corpus[name])
    assert unpacked is not None and unpacked == parsed


@pytest.mark.parametrize("name", ["libc10.so", "libtorch_cpu.so"])
def test_unpacked_symbols_of_torch(name: str) -> None:
    if not (TORCH_LIB / name).is_file():
        pytest.skip(f"no torch here ({TORCH_LIB})")
    unpacked, parsed = _both(TORCH_LIB / name)
    assert isinstance(unpacked, list) and len(unpacked) > 1000
    assert unpacked == parsed
    assert any(s.version_hidden for s in unpacked) or any(s.version for s in unpacked)


@pytest.mark.parametrize("name", ["libregister.so", "libplain.so", "libf32.so"])
def test_static_symbol_names_are_pyelftools_names(corpus: Corpus, name: str) -> None:
    lib = ElfLibrary.open(corpus[name])
    try:
        section = lib._section_of_type("SHT_SYMTAB")
        parsed = [str(s.name) for s in section.iter_symbols() if s.name] if section is not None else []
        assert lib.static_symbol_names() == parsed and parsed
    finally:
        lib.close()
