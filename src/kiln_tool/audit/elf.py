"""Small ELF helpers over pyelftools: what the checks need to know about one shared object.

`ElfLibrary` is read lazily, section by section: a file is memory-mapped (never read whole), the
audited libraries' dynamic symbols are read in full, while the big libraries they resolve against
(libtorch_cpu.so has 75k dynamic symbols) are only asked for single symbols through their GNU hash
table. `scan` walks a byte range in windows and drops each window's pages once searched, so the
memory an audit needs stays bounded whatever the size of the library.
"""

from __future__ import annotations

import contextlib
import io
import mmap
import struct
from collections.abc import Iterator
from functools import cached_property
from pathlib import Path
from typing import IO, Any, NamedTuple

from elftools.common.exceptions import ELFError
from elftools.elf.constants import SH_FLAGS
from elftools.elf.elffile import ELFFile
from elftools.elf.enums import ENUM_ST_INFO_BIND, ENUM_ST_INFO_TYPE, ENUM_ST_VISIBILITY
from elftools.elf.hash import GNUHashSection

ELF_MAGIC = b"\x7fELF"

# platform tag / uname machine -> (ELF class, e_machine)
MACHINES: dict[str, tuple[int, str]] = {
    "x86_64": (64, "EM_X86_64"),
    "aarch64": (64, "EM_AARCH64"),
    "ppc64le": (64, "EM_PPC64"),
    "s390x": (64, "EM_S390"),
    "i686": (32, "EM_386"),
}

# e_machine numbers of MACHINES (the ELF header's u16 at offset 18), for file_arch's header-only read.
_E_MACHINE = {62: "x86_64", 183: "aarch64", 21: "ppc64le", 22: "s390x", 3: "i686"}


def file_arch(path: Path) -> str | None:
    """The processor (a MACHINES key) an ELF file is built for, from its header alone; None for anything else."""
    try:
        with path.open("rb") as file:
            header = file.read(20)
    except OSError:
        return None
    if len(header) < 20 or not header.startswith(ELF_MAGIC) or header[5] not in (1, 2):
        return None
    return _E_MACHINE.get(int.from_bytes(header[18:20], "little" if header[5] == 1 else "big"))


_DF_TEXTREL = 0x4
_PF_X = 0x1
_VERSYM_HIDDEN = 0x8000
_RESERVED_VERSYM = frozenset({0, 1, 0xFF00, 0xFF01})  # pyelftools' ENUM_VERSYM: read as names, never versions
SCAN_WINDOW = 32 << 20  # bytes searched at once by `scan`
SCAN_OVERLAP = 8192  # longer than any path searched for: a match across a window edge is seen whole

# What a library's contents are read as: bytes (tests, small members) or a read-only mapping of its file.
Buffer = bytes | mmap.mmap


_BINDS = {v: k for k, v in ENUM_ST_INFO_BIND.items() if isinstance(v, int)}
_TYPES = {v: k for k, v in ENUM_ST_INFO_TYPE.items() if isinstance(v, int)}
_VISIBILITIES = {v: k for k, v in ENUM_ST_VISIBILITY.items() if isinstance(v, int)}


class ElfInvalid(ValueError):
    """Not a complete ELF shared object of the expected kind; the message says why."""


# What pyelftools raises on damaged structures it reads lazily.
# What pyelftools raises on damaged structures: besides its own ELFError, offsets or sizes out of range surface as
# ValueError, OverflowError ("Python int too large to convert to C ssize_t" from a seek past 2**63) and its own
# asserts (a string table that is no string table).
CORRUPT_ELF_ERRORS = (ELFError, struct.error, EOFError, UnicodeDecodeError, IndexError, KeyError, ValueError,
                      OverflowError, AssertionError)


class DynSymbol(NamedTuple):
    """One .dynsym entry with its GNU symbol version."""

    name: str
    defined: bool
    bind: str  # STB_GLOBAL, STB_WEAK, STB_GNU_UNIQUE, STB_LOCAL
    type: str  # STT_FUNC, STT_OBJECT, ...
    visibility: str  # STV_DEFAULT, STV_PROTECTED, ...
    version: str | None  # GLIBC_2.17; None when unversioned
    version_file: str | None  # for undefined symbols: the library the version need names
    version_hidden: bool = False

    def display(self) -> str:
        return f"{self.name}@{self.version}" if self.version else self.name


class _Layout(NamedTuple):
    """What one pass over an ELF file's program and section headers learns: everything the audit asks of them
    afterwards, so no later question walks the headers again (pyelftools builds a Section object per header and
    walk: a library with 3000 sections took a second per handful of walks)."""

    sections: tuple[tuple[str, str, int, int, int], ...]  # (name, sh_type, sh_flags, sh_offset, sh_size) by index
    index_by_name: dict[str, int]  # as pyelftools' own map: the last section of a name
    first_of_type: dict[str, Any]  # sh_type -> its first section (pyelftools' object, as the walk built it)
    stack_flags: int | None  # p_flags of the first PT_GNU_STACK
    has_interp: bool
    dynamic_segment: int | None  # index of the first PT_DYNAMIC


def _check_bounds(elf: ELFFile, size: int) -> _Layout:
    """Every header within the file, read once; pyelftools still builds each section, so a damaged one is refused
    here as before."""
    header = elf.header
    if header["e_phoff"] + header["e_phnum"] * header["e_phentsize"] > size:
        raise ElfInvalid(f"truncated: program headers end past the file's {size} bytes")
    if header["e_shnum"] and header["e_shoff"] + header["e_shnum"] * header["e_shentsize"] > size:
        raise ElfInvalid(f"truncated: section headers end past the file's {size} bytes")
    stack_flags: int | None = None
    has_interp = False
    dynamic_segment: int | None = None
    for index in range(elf.num_segments()):
        # The header alone: a PT_DYNAMIC Segment object walks the sections to find its string table.
        segment = elf._get_segment_header(index)
        if segment["p_offset"] + segment["p_filesz"] > size:
            raise ElfInvalid(f"truncated: segment {segment['p_type']} ends at "
                             f"{segment['p_offset'] + segment['p_filesz']}, past the file's {size} bytes")
        kind = segment["p_type"]
        if kind == "PT_GNU_STACK" and stack_flags is None:
            stack_flags = int(segment["p_flags"])
        elif kind == "PT_INTERP":
            has_interp = True
        elif kind == "PT_DYNAMIC" and dynamic_segment is None:
            dynamic_segment = index
    rows: list[tuple[str, str, int, int, int]] = []
    index_by_name: dict[str, int] = {}
    first_of_type: dict[str, Any] = {}
    for index, section in enumerate(elf.iter_sections()):
        if section["sh_type"] != "SHT_NOBITS" and section["sh_offset"] + section["sh_size"] > size:
            raise ElfInvalid(f"truncated: section {section.name or '#?'} ends at "
                             f"{section['sh_offset'] + section['sh_size']}, past the file's {size} bytes")
        kind = str(section["sh_type"])
        rows.append((section.name, kind, int(section["sh_flags"]), int(section["sh_offset"]),
                     int(section["sh_size"])))
        index_by_name[section.name] = index
        first_of_type.setdefault(kind, section)
    return _Layout(tuple(rows), index_by_name, first_of_type, stack_flags, has_interp, dynamic_segment)


class ElfLibrary:
    """A shared object opened for reading. `where` names it in messages."""

    def __init__(self, stream: IO[bytes], size: int, where: str, *, expect_machine: str | None = None,
                 buffer: Buffer | None = None, owned: IO[bytes] | None = None, executable: bool = False) -> None:
        self.where = where
        self.is_executable = False  # a program (ET_EXEC, or a PIE: ET_DYN with PT_INTERP), opened with executable
        self.size = size
        self._stream = stream
        self._owned = owned
        self.buffer: Buffer = buffer if buffer is not None else b""
        if size == 0:
            raise ElfInvalid("empty file (0 bytes)")
        stream.seek(0)
        magic = stream.read(4)
        if magic != ELF_MAGIC:
            raise ElfInvalid(f"not an ELF file (starts with {magic!r})")
        try:
            self.elf = ELFFile(stream)
            self._layout = _check_bounds(self.elf, size)
            # pyelftools' own name map (get_dwarf_info and other callers of get_section_by_name build it with
            # another walk of every section) is the one just made.
            self.elf._section_name_map = self._layout.index_by_name
            elf_type = self.elf.header["e_type"]
            self.elfclass = self.elf.elfclass
            self.machine = str(self.elf.header["e_machine"])
        except ElfInvalid:
            raise
        except (*CORRUPT_ELF_ERRORS, OSError) as exc:
            raise ElfInvalid(f"corrupt or truncated ELF: {exc}") from exc
        if executable and elf_type in ("ET_EXEC", "ET_DYN"):
            self.is_executable = elf_type == "ET_EXEC" or self._layout.has_interp
        elif elf_type != "ET_DYN":
            raise ElfInvalid(f"an ELF of type {elf_type}, not a shared object (ET_DYN)")
        if expect_machine is not None:
            want_class, want_machine = MACHINES.get(expect_machine, (64, "?"))
            if (self.elfclass, self.machine) != (want_class, want_machine):
                raise ElfInvalid(f"foreign ELF: {self.elfclass}-bit {self.machine}, expected {want_class}-bit "
                                 f"{want_machine} for {expect_machine}")
        if self.section_by_name(".dynamic") is None and self._dynamic_segment() is None:
            raise ElfInvalid("no dynamic section: a statically linked program" if self.is_executable
                             else "no dynamic section: not a loadable shared object")

    @classmethod
    def from_bytes(cls, data: bytes, where: str, *, expect_machine: str | None = None) -> ElfLibrary:
        return cls(io.BytesIO(data), len(data), where, expect_machine=expect_machine, buffer=data)

    @classmethod
    def open(cls, path: Path, *, expect_machine: str | None = None, where: str | None = None,
             executable: bool = False) -> ElfLibrary:
        """The file memory-mapped read-only: pages are read when a check touches them, never all at once."""
        file = path.open("rb")
        try:
            size = path.stat().st_size
            if size == 0:
                return cls(io.BytesIO(b""), 0, where or str(path), expect_machine=expect_machine)
            mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
            try:
                return cls(mapped, size, where or str(path), expect_machine=expect_machine,  # type: ignore[arg-type]
                           buffer=mapped, owned=file, executable=executable)
            except BaseException:
                mapped.close()
                raise
        except BaseException:
            file.close()
            raise

    def close(self) -> None:
        # A view into the mapping still alive (BufferError): the mapping goes when the view does.
        with contextlib.suppress(BufferError):
            self._stream.close()
        if self._owned is not None:
            self._owned.close()

    def release(self, start: int = 0, length: int | None = None) -> None:
        """Drop the mapped pages of [start, start+length) from memory (they are read again if touched)."""
        if not isinstance(self.buffer, mmap.mmap) or self.buffer.closed:
            return
        page = mmap.PAGESIZE
        begin = start - start % page
        end = self.size if length is None else min(self.size, start + length)
        if end > begin:
            self.buffer.madvise(mmap.MADV_DONTNEED, begin, end - begin)

    def scan(self, start: int, end: int) -> Iterator[tuple[int, int]]:
        """[start, end) in windows of SCAN_WINDOW (each overlapping the next by SCAN_OVERLAP): yields
        (window start, window end) to search with a pattern's pos/endpos over `buffer`; a match belongs
        to the window it starts in before the next window's start. Each window's pages are dropped after."""
        at = start
        while at < end:
            stop = min(end, at + SCAN_WINDOW)
            yield at, min(end, stop + SCAN_OVERLAP)
            self.release(at, stop + SCAN_OVERLAP - at)
            at = stop

    # -- dynamic section -------------------------------------------------------------------

    def _dynamic_segment(self) -> Any:
        index = self._layout.dynamic_segment
        return None if index is None else self.elf.get_segment(index)

    def section_by_name(self, name: str) -> Any:
        """The section of that name (the last, as pyelftools' get_section_by_name), or None."""
        index = self._layout.index_by_name.get(name)
        return None if index is None else self.elf.get_section(index)

    @cached_property
    def _dynamic_tags(self) -> list[tuple[str, Any]]:
        dynamic: Any = self.section_by_name(".dynamic") or self._dynamic_segment()
        tags: list[tuple[str, Any]] = []
        for tag in dynamic.iter_tags():
            kind = tag.entry.d_tag
            if kind == "DT_NULL":
                break
            if kind == "DT_NEEDED":
                tags.append((kind, tag.needed))
            elif kind == "DT_RPATH":
                tags.append((kind, tag.rpath))
            elif kind == "DT_RUNPATH":
                tags.append((kind, tag.runpath))
            elif kind == "DT_SONAME":
                tags.append((kind, tag.soname))
            else:
                tags.append((str(kind), tag.entry.d_val))
        return tags

    def _tag_values(self, kind: str) -> list[Any]:
        return [value for tag, value in self._dynamic_tags if tag == kind]

    @property
    def needed(self) -> list[str]:
        return list(self._tag_values("DT_NEEDED"))

    @property
    def soname(self) -> str | None:
        names = self._tag_values("DT_SONAME")
        return str(names[0]) if names else None

    @property
    def rpath(self) -> list[str] | None:
        """DT_RPATH entries split at ":", or None when there is no DT_RPATH."""
        values = self._tag_values("DT_RPATH")
        return None if not values else [e for v in values for e in str(v).split(":")]

    @property
    def runpath(self) -> list[str] | None:
        values = self._tag_values("DT_RUNPATH")
        return None if not values else [e for v in values for e in str(v).split(":")]

    @property
    def has_textrel(self) -> bool:
        if self._tag_values("DT_TEXTREL"):
            return True
        return any(int(flags) & _DF_TEXTREL for flags in self._tag_values("DT_FLAGS"))

    @property
    def init_array_size(self) -> int:
        return sum(int(v) for v in self._tag_values("DT_INIT_ARRAYSZ"))

    @property
    def stack_flags(self) -> int | None:
        """p_flags of PT_GNU_STACK, or None when the segment is missing."""
        return self._layout.stack_flags

    @property
    def executable_stack(self) -> bool:
        flags = self.stack_flags
        # Without PT_GNU_STACK the loader assumes an executable stack.
        return flags is None or bool(flags & _PF_X)

    # -- symbols and versions --------------------------------------------------------------

    def _section_of_type(self, sh_type: str) -> Any:
        """The first section of that type, or None."""
        return self._layout.first_of_type.get(sh_type)

    @cached_property
    def _dynsym(self) -> Any:
        return self._section_of_type("SHT_DYNSYM")

    @cached_property
    def _versym(self) -> Any:
        return self._section_of_type("SHT_GNU_versym")

    @cached_property
    def _verneed_by_index(self) -> dict[int, tuple[str, str]]:
        """version index -> (file, version name) of the version needs."""
        section = self._section_of_type("SHT_GNU_verneed")
        result: dict[int, tuple[str, str]] = {}
        if section is None:
            return result
        for verneed, auxiliaries in section.iter_versions():
            for aux in auxiliaries:
                result[int(aux["vna_other"])] = (str(verneed.name), str(aux.name))
        return result

    @cached_property
    def version_definitions(self) -> dict[int, str]:
        """version index -> version name of the versions this library defines."""
        section = self._section_of_type("SHT_GNU_verdef")
        result: dict[int, str] = {}
        if section is None:
            return result
        for verdef, auxiliaries in section.iter_versions():
            names = [str(aux.name) for aux in auxiliaries]
            if names:
                result[int(verdef["vd_ndx"])] = names[0]
        return result

    @property
    def version_needs(self) -> dict[str, list[str]]:
        """file -> version names needed from it (e.g. libc.so.6 -> [GLIBC_2.14, ...])."""
        result: dict[str, list[str]] = {}
        for file, name in self._verneed_by_index.values():
            result.setdefault(file, []).append(name)
        return result

    def _version_of(self, index: int, defined: bool) -> tuple[str | None, str | None, bool]:
        if self._versym is None:
            return None, None, False
        ndx_field = self._versym.get_symbol(index)["ndx"]
        if not isinstance(ndx_field, int):  # VER_NDX_LOCAL / VER_NDX_GLOBAL
            return None, None, False
        return self._version_of_raw(ndx_field, defined)

    def _symbol(self, index: int, symbol: Any) -> DynSymbol:
        defined = symbol["st_shndx"] != "SHN_UNDEF"
        version, version_file, hidden = self._version_of(index, defined)
        return DynSymbol(name=str(symbol.name), defined=defined, bind=str(symbol["st_info"]["bind"]),
                         type=str(symbol["st_info"]["type"]), visibility=str(symbol["st_other"]["visibility"]),
                         version=version, version_file=version_file, version_hidden=hidden)

    @cached_property
    def dynamic_symbols(self) -> list[DynSymbol]:
        """Every named .dynsym entry (read in full: use for the audited libraries only)."""
        if self._dynsym is None:
            return []
        fast = self._unpacked_dynamic_symbols()
        if fast is not None:
            return fast
        return [self._symbol(i, s) for i, s in enumerate(self._dynsym.iter_symbols()) if s.name]

    def _unpacked_dynamic_symbols(self) -> list[DynSymbol] | None:
        """.dynsym unpacked with struct straight from the buffer: what _symbol gives for each entry, without
        pyelftools' per-field parsing (seconds for a library with 30k exports). None when the layout is not
        the standard one (then pyelftools reads it)."""
        buffer, section = self.buffer, self._dynsym
        if not buffer:
            return None
        endian = "<" if self.elf.little_endian else ">"
        layout = struct.Struct(endian + ("IBBHQQ" if self.elfclass == 64 else "IIIBBH"))
        offset, size, entsize = int(section["sh_offset"]), int(section["sh_size"]), int(section["sh_entsize"])
        if entsize != layout.size or not 0 <= section["sh_link"] < self.elf.num_sections():
            return None
        strtab = self.elf.get_section(section["sh_link"])
        str_start = int(strtab["sh_offset"])
        str_end = str_start + int(strtab["sh_size"])
        count = size // entsize
        versions: tuple[int, ...] | None = None
        if self._versym is not None:
            if int(self._versym["sh_size"]) < 2 * count:
                return None
            versions = struct.unpack_from(f"{endian}{count}H", buffer, int(self._versym["sh_offset"]))
        symbols: list[DynSymbol] = []
        for index, fields in enumerate(layout.iter_unpack(buffer[offset:offset + count * entsize])):
            if self.elfclass == 64:
                name_at, info, other, shndx = fields[0], fields[1], fields[2], fields[3]
            else:
                name_at, info, other, shndx = fields[0], fields[3], fields[4], fields[5]
            if name_at == 0:
                continue
            start = str_start + name_at
            end = buffer.find(b"\0", start, str_end)
            if start >= str_end or end < 0:
                raise ElfInvalid(f"corrupt ELF: .dynsym entry {index} names offset {name_at} past its string table")
            name = bytes(buffer[start:end]).decode("latin-1")  # as pyelftools decodes names
            if not name:
                continue
            defined = shndx != 0
            version, version_file, hidden = (None, None, False) if versions is None \
                else self._version_of_raw(versions[index], defined)
            symbols.append(DynSymbol(name=name, defined=defined, bind=_BINDS.get(info >> 4, str(info >> 4)),
                                     type=_TYPES.get(info & 0xF, str(info & 0xF)),
                                     visibility=_VISIBILITIES.get(other & 0x7, str(other & 0x7)),
                                     version=version, version_file=version_file, version_hidden=hidden))
        return symbols

    def _version_of_raw(self, raw: int, defined: bool) -> tuple[str | None, str | None, bool]:
        if raw in (0, 1):  # VER_NDX_LOCAL / VER_NDX_GLOBAL
            return None, None, False
        hidden = bool(raw & _VERSYM_HIDDEN)
        ndx = raw & ~_VERSYM_HIDDEN
        if ndx <= 1:
            return None, None, hidden
        if defined:
            return self.version_definitions.get(ndx), None, hidden
        file_version = self._verneed_by_index.get(ndx)
        if file_version is None:
            return None, None, hidden
        return file_version[1], file_version[0], hidden

    @cached_property
    def _gnu_hash(self) -> GNUHashSection | None:
        section = self._section_of_type("SHT_GNU_HASH")
        return section if isinstance(section, GNUHashSection) else None

    @cached_property
    def _definitions_by_name(self) -> dict[str, list[DynSymbol]]:
        table: dict[str, list[DynSymbol]] = {}
        for symbol in self.dynamic_symbols:
            if symbol.defined:
                table.setdefault(symbol.name, []).append(symbol)
        return table

    def _hash_chain(self, name: str) -> Iterator[int]:
        """Indices of the .dynsym entries in `name`'s GNU hash chain (ld.so's own lookup path)."""
        table = self._gnu_hash
        assert table is not None
        params = table.params
        namehash = table.gnu_hash(name)
        if not params["nbuckets"] or not table._matches_bloom(namehash):
            return
        index = int(params["buckets"][namehash % params["nbuckets"]])
        if index < params["symoffset"]:
            return
        word = table._wordsize
        chain = table["sh_offset"] + 4 * word + params["bloom_size"] * table._xwordsize + params["nbuckets"] * word
        fmt = "<I" if self.elf.little_endian else ">I"
        while True:
            self._stream.seek(chain + (index - params["symoffset"]) * word)
            value = struct.unpack(fmt, self._stream.read(word))[0]
            if value | 1 == namehash | 1:
                yield index
            if value & 1:
                return
            index += 1

    def definitions(self, name: str) -> list[DynSymbol]:
        """The dynamic symbols this library defines under `name` (one per version)."""
        if self._gnu_hash is None or self._dynsym is None:
            return self._definitions_by_name.get(name, [])
        found: list[DynSymbol] = []
        for index in self._hash_chain(name):
            entry = self._entry(index)
            if entry is None:  # not the standard layout: pyelftools reads it
                raw = self._dynsym.get_symbol(index)
                if raw.name == name and raw["st_shndx"] != "SHN_UNDEF":
                    found.append(self._symbol(index, raw))
                continue
            entry_name, info, other, shndx = entry
            if entry_name != name or shndx == 0:
                continue
            raw_version = self._raw_version(index)
            if raw_version is None:
                found.append(self._symbol(index, self._dynsym.get_symbol(index)))
                continue
            # As _version_of: pyelftools gives the reserved indices (0, 1, 0xff00, 0xff01) as names, no version.
            version, version_file, hidden = (None, None, False) if raw_version in _RESERVED_VERSYM \
                else self._version_of_raw(raw_version, True)
            found.append(DynSymbol(name=entry_name, defined=True, bind=_BINDS.get(info >> 4, str(info >> 4)),
                                   type=_TYPES.get(info & 0xF, str(info & 0xF)),
                                   visibility=_VISIBILITIES.get(other & 0x7, str(other & 0x7)),
                                   version=version, version_file=version_file, version_hidden=hidden))
        return found

    @cached_property
    def _dynsym_layout(self) -> tuple[struct.Struct, int, int, int, int, int] | None:
        """(entry struct, .dynsym offset, entry count, string table start and end, versym offset or -1) when .dynsym
        has the standard layout and the library is mapped; None otherwise."""
        section = self._dynsym
        if not self.buffer or section is None:
            return None
        layout = struct.Struct(("<" if self.elf.little_endian else ">") + ("IBBHQQ" if self.elfclass == 64
                                                                             else "IIIBBH"))
        if int(section["sh_entsize"]) != layout.size or not 0 <= section["sh_link"] < self.elf.num_sections():
            return None
        strtab = self.elf.get_section(section["sh_link"])
        versym = -1 if self._versym is None else int(self._versym["sh_offset"])
        count = int(section["sh_size"]) // layout.size
        if versym >= 0 and int(self._versym["sh_size"]) < 2 * count:
            return None
        return (layout, int(section["sh_offset"]), count, int(strtab["sh_offset"]),
                int(strtab["sh_offset"]) + int(strtab["sh_size"]), versym)

    def _entry(self, index: int) -> tuple[str, int, int, int] | None:
        """(name, st_info, st_other, st_shndx) of .dynsym entry `index`, unpacked from the mapping with the name
        decoded as pyelftools decodes it; None when pyelftools must read it (another layout, an index or a name
        outside the tables)."""
        layout = self._dynsym_layout
        if layout is None or not 0 <= index < layout[2]:
            return None
        entry, offset, _count, str_start, str_end, _versym = layout
        fields = entry.unpack_from(self.buffer, offset + index * entry.size)
        if self.elfclass == 64:
            name_at, info, other, shndx = fields[0], fields[1], fields[2], fields[3]
        else:
            name_at, info, other, shndx = fields[0], fields[3], fields[4], fields[5]
        start = str_start + name_at
        end = self.buffer.find(b"\0", start, str_end) if start < str_end else -1
        if end < 0:
            return None
        return bytes(self.buffer[start:end]).decode("utf-8", errors="replace"), info, other, shndx

    def _raw_version(self, index: int) -> int | None:
        """The versym entry of `index` (0 without a versym section); None when pyelftools must read it."""
        layout = self._dynsym_layout
        if layout is None:
            return None
        if layout[5] < 0:
            return 0
        return int(struct.unpack_from(("<" if self.elf.little_endian else ">") + "H", self.buffer,
                                      layout[5] + 2 * index)[0])

    # -- contents --------------------------------------------------------------------------

    def section_data(self, name: str) -> bytes | None:
        section = self.section_by_name(name)
        if section is None or section["sh_type"] == "SHT_NOBITS":
            return None
        return bytes(section.data())

    def section_offset(self, name: str) -> int | None:
        """Where the section's bytes start in the file; None when absent."""
        section = self.section_by_name(name)
        return None if section is None else int(section["sh_offset"])

    def section_view(self, name: str) -> memoryview | None:
        """The section's bytes without a copy (a view into the mapping); None when absent or empty of data."""
        section = self.section_by_name(name)
        if section is None or section["sh_type"] == "SHT_NOBITS":
            return None
        offset, size = int(section["sh_offset"]), int(section["sh_size"])
        if not self.buffer:
            return memoryview(bytes(section.data()))
        return memoryview(self.buffer)[offset:offset + size]

    @property
    def section_names(self) -> list[str]:
        return [row[0] for row in self._layout.sections]

    def static_symbol_names(self, containing: bytes = b"") -> list[str]:
        """Names in .symtab (empty for stripped libraries); with `containing`, only the names holding those bytes
        (decoded only when they do: a big library's .symtab holds hundreds of thousands of names)."""
        if containing not in self._static_names_cache:
            self._static_names_cache[containing] = self._static_symbol_names(containing)
        return list(self._static_names_cache[containing])

    @cached_property
    def _static_names_cache(self) -> dict[bytes, tuple[str, ...]]:
        return {}

    def _static_symbol_names(self, containing: bytes) -> tuple[str, ...]:
        section = self._section_of_type("SHT_SYMTAB")
        if section is None:
            return ()
        entsize, strtab_index = int(section["sh_entsize"]), int(section["sh_link"])
        if not self.buffer or entsize != (24 if self.elfclass == 64 else 16) or \
                not 0 <= strtab_index < self.elf.num_sections():
            return tuple(str(s.name) for s in section.iter_symbols() if s.name and containing.decode("latin-1")
                         in str(s.name))
        # st_name is the first word of an entry in both classes: read it straight from the mapping.
        strtab = self.elf.get_section(strtab_index)
        str_start = int(strtab["sh_offset"])
        str_end = str_start + int(strtab["sh_size"])
        offset, count = int(section["sh_offset"]), int(section["sh_size"]) // entsize
        fmt = ("<" if self.elf.little_endian else ">") + "I"
        names = []
        for index in range(count):
            if index and index % 32768 == 0:  # a big .symtab/.strtab: their pages go as they are read
                self.release(offset, count * entsize)
                self.release(str_start, str_end - str_start)
            name_at = struct.unpack_from(fmt, self.buffer, offset + index * entsize)[0]
            if name_at == 0:
                continue
            start = str_start + name_at
            end = self.buffer.find(b"\0", start, str_end)
            if start >= str_end or end < 0:
                raise ElfInvalid(f"corrupt ELF: .symtab entry {index} names offset {name_at} past its string table")
            if end > start and (not containing or self.buffer.find(containing, start, end) != -1):
                names.append(bytes(self.buffer[start:end]).decode("latin-1"))
        return tuple(names)

    def allocated_sections(self) -> Iterator[tuple[str, int, int]]:
        """(name, offset, size) of the sections with file contents."""
        for name, kind, _flags, offset, size in self._layout.sections:
            if kind != "SHT_NOBITS" and size:
                yield name, offset, size

    def is_allocated(self, name: str) -> bool:
        section = self.section_by_name(name)
        return section is not None and bool(section["sh_flags"] & SH_FLAGS.SHF_ALLOC)
