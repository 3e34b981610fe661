"""The audit's fast paths answer as the slow ones they stand in for (issue 44: time on a 1 GB library).

ElfLibrary reads the section and program headers once (pyelftools built a Section per header per walk), looks up
GNU-hash definitions by struct from the mapping (not pyelftools' per-field parse), build-paths reads each compile
unit's top DIE straight from the mapping (not pyelftools' whole abbreviation tables), and BuildPathRule.classify
matches its globs as one regex, and installed_distributions names a distribution from its metadata's header
block. Each is compared here with the pyelftools or fnmatch answer, on small libraries
built from generated assembly and C with the real toolchain, also damaged at generated places: a fast path may
hand a case back to the slow one, never answer it differently.
"""

from __future__ import annotations

import fnmatch
import functools
import shutil
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kiln_tool.audit import dwarf_units
from kiln_tool.audit.checks.build_paths import _MALFORMED_DWARF
from kiln_tool.audit.elf import ElfInvalid, ElfLibrary
from kiln_tool.audit.policy import _HEADER_EXTENSIONS, BuildPathRule, load_policy

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is needed")
FAST = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

_SECTION_NAME = st.from_regex(r"\.[a-z][a-z0-9_.]{0,12}", fullmatch=True)
_SECTION = st.tuples(_SECTION_NAME, st.sampled_from(['"a",@progbits', '"aw",@progbits', '"aw",@nobits',
                                                     '"",@progbits', '"ax",@progbits']), st.integers(0, 300))


def _link(tmp: Path, name: str, assembly: str, *flags: str) -> Path:
    (tmp / f"{name}.s").write_text(assembly)
    out = tmp / name
    subprocess.run(["gcc", "-shared", "-nostdlib", "-Wl,-z,noexecstack", *flags, "-o", str(out),
                    str(tmp / f"{name}.s")], check=True, capture_output=True)
    return out


def _assembly(sections: list[tuple[str, str, int]], symbols: int) -> str:
    lines = [".text", ".globl kiln_entry", ".type kiln_entry,@function", "kiln_entry:", " ret"]
    for name, flags, size in sections:
        lines += [f".section {name},{flags}", f".zero {size}"]
    lines += [".data"]
    for i in range(symbols):
        lines += [f".globl kiln_sym_{i}", f".type kiln_sym_{i},@object", f"kiln_sym_{i}:", ".byte 1"]
    return "\n".join(lines) + "\n"


def _slow_layout(path: Path) -> dict[str, object]:
    """What the audit asked pyelftools before: its walks of every section and segment, on a fresh ELFFile."""
    with path.open("rb") as file:
        elf = ELFFile(file)
        sections = list(elf.iter_sections())
        segments = list(elf.iter_segments())
        first: dict[str, int] = {}
        by_name: dict[str, dict[str, object]] = {}
        for index, section in enumerate(sections):
            first.setdefault(str(section["sh_type"]), index)
            named = elf.get_section_by_name(section.name)
            assert named is not None
            by_name[section.name] = dict(named.header)
        return {
            "names": [s.name for s in sections],
            "allocated": [(s.name, int(s["sh_offset"]), int(s["sh_size"])) for s in sections
                          if s["sh_type"] != "SHT_NOBITS" and s["sh_size"]],
            "by_name": by_name,
            "first_of_type": {kind: dict(sections[index].header) for kind, index in first.items()},
            "stack": next((int(s["p_flags"]) for s in segments if s["p_type"] == "PT_GNU_STACK"), None),
            "dynamic": next((dict(s.header) for s in segments if s["p_type"] == "PT_DYNAMIC"), None),
        }


def _fast_layout(lib: ElfLibrary) -> dict[str, object]:
    segment = lib._dynamic_segment()
    return {
        "names": lib.section_names,
        "allocated": list(lib.allocated_sections()),
        "by_name": {name: dict(lib.section_by_name(name).header) for name in lib.section_names},
        "first_of_type": {kind: dict(lib._section_of_type(kind).header) for kind in lib._layout.first_of_type},
        "stack": lib.stack_flags,
        "dynamic": None if segment is None else dict(segment.header),
    }


def _rename(path: Path, renames: list[tuple[int, int]]) -> None:
    """Section j takes section i's name (sh_name) for each (i, j): the linker never writes two sections of one
    name, a damaged or hand-made library may, and a lookup by name must then find the one pyelftools finds."""
    data = bytearray(path.read_bytes())
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    for i, j in renames:
        name = struct.unpack_from("<I", data, shoff + (i % shnum) * shentsize)[0]
        struct.pack_into("<I", data, shoff + (j % shnum) * shentsize, name)
    path.write_bytes(bytes(data))


@FAST
@given(sections=st.lists(_SECTION, max_size=40, unique_by=lambda s: s[0]), symbols=st.integers(0, 30),
       renames=st.lists(st.tuples(st.integers(1, 60), st.integers(1, 60)), max_size=3))
def test_header_layout_is_pyelftools_walk(tmp_path: Path, sections: list[tuple[str, str, int]], symbols: int,
                                          renames: list[tuple[int, int]]) -> None:
    path = _link(tmp_path, "lib.so", _assembly(sections, symbols))
    _rename(path, renames)
    lib = ElfLibrary.open(path)
    try:
        assert _fast_layout(lib) == _slow_layout(path)
    finally:
        lib.close()


@FAST
@given(symbols=st.integers(1, 60), versioned=st.booleans(), data=st.data())
def test_hash_lookup_is_pyelftools_read(tmp_path: Path, symbols: int, versioned: bool, data: st.DataObject) -> None:
    flags = ["-Wl,--hash-style=gnu"]
    if versioned:
        (tmp_path / "v.map").write_text("KILN_1 { global: kiln_sym_0; kiln_sym_1; };\nKILN_2 { global: *; };\n")
        flags.append(f"-Wl,--version-script={tmp_path / 'v.map'}")
    path = _link(tmp_path, "lib.so", _assembly([], symbols), *flags)
    lib = ElfLibrary.open(path)
    slow = ElfLibrary.open(path)
    slow.__dict__["_dynsym_layout"] = None  # every lookup through pyelftools' get_symbol
    try:
        names = [f"kiln_sym_{i}" for i in range(symbols)] + ["kiln_entry", "kiln_missing"]
        names += data.draw(st.lists(st.text(min_size=1, max_size=8), max_size=5))
        assert lib._dynsym_layout is not None
        for name in names:
            assert lib.definitions(name) == slow.definitions(name), name
    finally:
        lib.close()
        slow.close()


def _slow_top_names(lib: ElfLibrary) -> list[tuple[object, object]] | str:
    try:
        found = []
        for unit in lib.elf.get_dwarf_info(relocate_dwarf_sections=False).iter_CUs():
            attributes = unit.get_top_DIE().attributes
            name, comp_dir = attributes.get("DW_AT_name"), attributes.get("DW_AT_comp_dir")
            found.append((dwarf_units.ABSENT if name is None else name.value,
                          dwarf_units.ABSENT if comp_dir is None else comp_dir.value))
        return found
    except _MALFORMED_DWARF:
        return "malformed"


def _judged(pairs: list[tuple[object, object]] | str) -> object:
    # build-paths reads a value as text only when it is bytes; any other form is malformed debug info.
    if isinstance(pairs, str):
        return pairs
    return [tuple(v if isinstance(v, bytes) or v is dwarf_units.ABSENT else "not a string" for v in p)
            for p in pairs]


_FILE = st.from_regex(r"[a-z][a-z0-9_]{0,20}", fullmatch=True)


@pytest.fixture(scope="module")
def dwarf_builds(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    """One library per DWARF shape gcc makes: versions 4 and 5, 32- and 64-bit DWARF, two units with a short
    name (an inline DW_FORM_string) and a long one (.debug_str / .debug_line_str)."""
    builds = {}
    for version in ("-gdwarf-4", "-gdwarf-5"):
        for width in ("-gdwarf32", "-gdwarf64"):
            tmp = tmp_path_factory.mktemp("dwarf")
            (tmp / "src").mkdir()
            (tmp / "src" / "a.c").write_text("int kiln_a(int x) { return x + 1; }\n")
            (tmp / "src" / "a_rather_long_source_name_for_strp.c").write_text("int kiln_b(int x) { return x; }\n")
            out = tmp / "lib.so"
            subprocess.run(["gcc", "-shared", "-fPIC", "-g", version, width, "-o", str(out), "src/a.c",
                            "src/a_rather_long_source_name_for_strp.c"], check=True, capture_output=True, cwd=tmp)
            builds[version, width] = out
    return builds


def test_top_names_read_gccs_shapes_as_pyelftools(dwarf_builds: dict[tuple[str, str], Path]) -> None:
    for shape, path in dwarf_builds.items():
        lib = ElfLibrary.open(path)
        try:
            fast = dwarf_units.top_names(lib)
            assert fast is not None, f"{shape}: gcc's DWARF handed back to pyelftools"
            assert _judged(fast) == _judged(_slow_top_names(lib)), shape
            assert {v for pair in fast for v in pair if isinstance(v, bytes)} >= {b"src/a.c"}
        finally:
            lib.close()


@settings(max_examples=60, deadline=None)
@given(shape=st.sampled_from([("-gdwarf-4", "-gdwarf32"), ("-gdwarf-5", "-gdwarf32"), ("-gdwarf-5", "-gdwarf64")]),
       section=st.sampled_from([".debug_info", ".debug_abbrev", ".debug_str", ".debug_line_str"]),
       edits=st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), min_size=1, max_size=4))
# CI's find: DW_AT_name's form byte in .debug_abbrev turned into DW_FORM_addrx1 (0x29) in a DWARF 4 unit; the fast
# reader gave an int where pyelftools calls the unit malformed (it now hands every non-string form to pyelftools)
@example(shape=("-gdwarf-4", "-gdwarf32"), section=".debug_abbrev", edits=[(166, 41)])
def test_damaged_dwarf_is_never_decided_otherwise(dwarf_builds: dict[tuple[str, str], Path], tmp_path_factory:
                                                 pytest.TempPathFactory, shape: tuple[str, str], section: str,
                                                 edits: list[tuple[int, int]]) -> None:
    data = bytearray(dwarf_builds[shape].read_bytes())
    lib = ElfLibrary.from_bytes(bytes(data), "lib.so")
    target = lib.section_by_name(section)
    if target is None:
        return
    start, size = int(target["sh_offset"]), int(target["sh_size"])
    for at, value in edits:
        data[start + at % size] = value
    try:
        damaged = ElfLibrary.from_bytes(bytes(data), "lib.so")
    except ElfInvalid:
        return
    fast = dwarf_units.top_names(damaged)
    if fast is not None:  # it answered: pyelftools must give the same answer, not an error
        assert _judged(fast) == _judged(_slow_top_names(damaged))


def _classify_by_fnmatch(rule: BuildPathRule, path: str) -> str | None:
    """BuildPathRule.classify as written before its globs became one regex."""
    if path.startswith(rule.prebuilt_prefixes):
        return "prebuilt"
    parts = path.strip("/").split("/")
    if len(parts) < 2:
        return None
    name = parts[-1]
    stem, dot, extension = name.rpartition(".")
    source_file = (bool(dot) and bool(stem) and extension.lower() in rule.source_extensions) or \
        name in rule.source_files
    build_tree = any(fnmatch.fnmatchcase(p, pattern) for p in parts[:-1] for pattern in rule.build_dirs)
    rooted = any(fnmatch.fnmatchcase(path, pattern + "/*") or fnmatch.fnmatchcase(path, pattern)
                 for pattern in rule.roots)
    if not (source_file or build_tree or rooted):
        return None
    if path.startswith(rule.toolchain_prefixes) or not rule.dependency_dirs.isdisjoint(parts[:-1]):
        return "toolchain"
    if source_file and "include" in parts[:-1] and (
            extension.lower() in _HEADER_EXTENSIONS or not (build_tree or rooted)):
        return "toolchain"
    return "source"


_PART = st.one_of(st.sampled_from(["build", "src", "home", "ci", "include", "usr", "opt", "tmp", "_deps",
                                   "cmake-build-x", "third_party", "workspace", "runner", "work", "site-packages",
                                   "torch", "builddir"]),
                  st.from_regex(r"[A-Za-z0-9._+~@-]{1,12}", fullmatch=True))
_NAME = st.one_of(_PART, st.builds(lambda s, e: f"{s}.{e}", _PART, st.sampled_from(
    ["c", "cc", "cpp", "cu", "h", "hpp", "cuh", "py", "so", "txt", "o", "CPP", "Cu"])))


@functools.cache
def _rule(policy: str) -> BuildPathRule:
    return load_policy(policy).build_paths


@settings(max_examples=150, deadline=None)
@given(parts=st.lists(_PART, min_size=0, max_size=6), name=_NAME, policy=st.sampled_from(["manylinux_2_28",
                                                                                         "manylinux_2_17"]))
def test_classify_is_the_fnmatch_rule(parts: list[str], name: str, policy: str) -> None:
    rule = _rule(policy)
    path = "/" + "/".join([*parts, name])
    assert rule.classify(path) == _classify_by_fnmatch(rule, path)


def test_distribution_names_are_their_metadata() -> None:
    # installed_distributions names each distribution from its metadata's header block alone.
    import sys
    import warnings
    from importlib.metadata import distributions

    from kiln_tool.audit.dependencies import distribution_name

    seen = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a distribution without a Name warns
        for dist in distributions(path=list(sys.path)):
            assert distribution_name(dist) == (dist.metadata["Name"] or ""), dist
            seen += 1
    assert seen > 10


@settings(max_examples=60, deadline=None)
@given(chunks=st.lists(st.binary(max_size=3000), max_size=40), batch=st.integers(1, 5000),
       fail_at=st.one_of(st.none(), st.integers(0, 45)), writer_fails=st.booleans(), threaded=st.booleans())
def test_unpacking_thread_writes_and_hashes_every_chunk(chunks: list[bytes], batch: int, fail_at: int | None,
                                                        writer_fails: bool, threaded: bool) -> None:
    # library_file writes and hashes in a second thread: the file and hash are the bytes in order, and an error
    # of either side (a bad CRC in the stream, a full disk) reaches the caller after both threads stop.
    import hashlib
    import io

    from kiln_tool.audit import inputs

    class Broken(Exception):
        pass

    class Out(io.BytesIO):
        def write(self, data: object) -> int:
            if writer_fails and fail_at is not None and self.tell() >= fail_at:
                raise Broken("disk full")
            return super().write(data)  # type: ignore[arg-type]

    def stream() -> Iterator[bytes]:
        for i, chunk in enumerate(chunks):
            if not writer_fails and fail_at == i:
                raise Broken("bad CRC")
            yield chunk

    out, hasher = Out(), hashlib.sha256()
    original = inputs._BATCH_BYTES
    inputs._BATCH_BYTES = batch
    try:
        size = inputs._write_and_hash(stream(), out, hasher, threaded=threaded)
    except Broken:
        assert fail_at is not None
        return
    finally:
        inputs._BATCH_BYTES = original
    whole = b"".join(chunks)
    assert (out.getvalue(), hasher.digest(), size) == (whole, hashlib.sha256(whole).digest(), len(whole))
    assert not (not writer_fails and fail_at is not None and fail_at < len(chunks))
