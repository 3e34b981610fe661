"""Small pyelftools readers the build tests use to look inside our own _C."""

from __future__ import annotations

import io
import zipfile
from dataclasses import dataclass
from pathlib import Path

from elftools.elf.constants import P_FLAGS
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile


@dataclass(frozen=True)
class ElfFacts:
    needed: tuple[str, ...]
    runpath: tuple[str, ...]
    rpath: tuple[str, ...]
    textrel: bool
    exec_stack: bool
    exported: tuple[str, ...]
    sections: tuple[str, ...]


def read_elf(data: bytes) -> ElfFacts:
    elf = ELFFile(io.BytesIO(data))
    needed: list[str] = []
    runpath: list[str] = []
    rpath: list[str] = []
    textrel = False
    for section in elf.iter_sections():
        if isinstance(section, DynamicSection):
            for tag in section.iter_tags():
                if tag.entry.d_tag == "DT_NEEDED":
                    needed.append(tag.needed)
                elif tag.entry.d_tag == "DT_RUNPATH":
                    runpath += tag.runpath.split(":")
                elif tag.entry.d_tag == "DT_RPATH":
                    rpath += tag.rpath.split(":")
                elif tag.entry.d_tag == "DT_TEXTREL" or (tag.entry.d_tag == "DT_FLAGS" and tag.entry.d_val & 0x4):
                    textrel = True
    exec_stack = any(
        seg["p_type"] == "PT_GNU_STACK" and seg["p_flags"] & P_FLAGS.PF_X for seg in elf.iter_segments()
    )
    dynsym = elf.get_section_by_name(".dynsym")
    exported = tuple(sorted(
        sym.name for sym in dynsym.iter_symbols()
        if sym.name and sym["st_shndx"] != "SHN_UNDEF"
        and sym["st_info"]["bind"] in ("STB_GLOBAL", "STB_WEAK")
        and sym["st_other"]["visibility"] in ("STV_DEFAULT", "STV_PROTECTED")
    ))
    return ElfFacts(tuple(needed), tuple(runpath), tuple(rpath), textrel, exec_stack, exported,
                    tuple(s.name for s in elf.iter_sections()))


def extension_of(wheel: Path) -> tuple[str, bytes]:
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n.startswith("opkiln/_C.") and n.endswith(".so")]
        assert len(names) == 1, f"{wheel.name} holds {names}, expected exactly one opkiln/_C*.so"
        return names[0], zf.read(names[0])


def wheel_text(wheel: Path, suffix: str) -> str:
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(suffix)]
        return zf.read(name).decode()
