"""registration (audit/checks/registration.py): reading the registration macros' symbols back (every macro,
mangled at file scope or in a namespace, clones, fragments, lengths that do not fit), and the words of each
verdict on libraries g++ built: initializers missing, present, a namespace defined twice in a wheel, a
namespace the build info lists that no library registers, a library that links torch and registers nothing."""

from __future__ import annotations

import io
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from audit_corpus import TORCH_LIB, Corpus, make_wheel
from hypothesis import given
from hypothesis import strategies as st

from kiln_tool.audit import CheckResult, audit_paths
from kiln_tool.audit.checks.registration import parse_init_symbol

INIT_API = "_ZN5torch6detail16TorchLibraryInitC1EiPFvRNS_7LibraryEEPKc"


def _file_scope(identifier: str) -> str:
    """How g++ mangles a static function at file scope taking torch::Library& (Itanium: _ZL<length><name>)."""
    return f"_ZL{len(identifier)}{identifier}RN5torch7LibraryE"


def _in_namespace(identifier: str) -> str:
    """The same inside an anonymous namespace: _ZN12_GLOBAL__N_1L<length><name>E<parameters>."""
    return f"_ZN12_GLOBAL__N_1L{len(identifier)}{identifier}ERN5torch7LibraryE"


def _nested(outer: str, identifier: str) -> str:
    """A static function named ``identifier`` inside a namespace named ``outer``."""
    return f"_ZN{len(outer)}{outer}L{len(identifier)}{identifier}ERN5torch7LibraryE"


CASES: dict[str, tuple[str, str] | None] = {
    _file_scope("TORCH_LIBRARY_init_kilnops"): ("TORCH_LIBRARY", "kilnops"),
    f"_ZL{len('TORCH_LIBRARY_static_init_kilnops')}TORCH_LIBRARY_static_init_kilnops": ("TORCH_LIBRARY", "kilnops"),
    _in_namespace("TORCH_LIBRARY_init_kiln_ops2"): ("TORCH_LIBRARY", "kiln_ops2"),
    _file_scope("STABLE_TORCH_LIBRARY_init_torchaudio"): ("STABLE_TORCH_LIBRARY", "torchaudio"),
    _file_scope("TORCH_LIBRARY_FRAGMENT_init_kilnops_123"): ("TORCH_LIBRARY_FRAGMENT", "kilnops"),
    _file_scope("TORCH_LIBRARY_FRAGMENT_init_kiln_ops_7"): ("TORCH_LIBRARY_FRAGMENT", "kiln_ops"),
    _file_scope("STABLE_TORCH_LIBRARY_FRAGMENT_init_ta_9"): ("STABLE_TORCH_LIBRARY_FRAGMENT", "ta"),
    _file_scope("TORCH_LIBRARY_init_kilnops") + ".cold": ("TORCH_LIBRARY", "kilnops"),
    _file_scope("TORCH_LIBRARY_init_kilnops") + ".constprop.0": ("TORCH_LIBRARY", "kilnops"),
    "TORCH_LIBRARY_init_kilnops": ("TORCH_LIBRARY", "kilnops"),  # a C-linkage build of the macro
    "TORCH_LIBRARY_init_kilnops.cold": ("TORCH_LIBRARY", "kilnops"),
    "TORCH_LIBRARY_init_kilnops.constprop.0": ("TORCH_LIBRARY", "kilnops"),
    # The registration is the second identifier of the name: the first is read and passed over.
    _nested("TORCH_LIBRARY_IMPL_kilnops_CPU", "TORCH_LIBRARY_init_kilnops"): ("TORCH_LIBRARY", "kilnops"),
    _nested("TORCH_LIBRARY_FRAGMENT_init_x_y", "TORCH_LIBRARY_init_kilnops"): ("TORCH_LIBRARY", "kilnops"),
    # Not a namespace's registration:
    _file_scope("TORCH_LIBRARY_IMPL_init_kilnops_CPU_0"): None,
    _file_scope("TORCH_LIBRARY_FRAGMENT_init_kilnops_x1"): None,  # a fragment's uid is a number
    _file_scope("TORCH_LIBRARY_FRAGMENT_init__12"): None,  # no namespace before the uid
    _file_scope("TORCH_LIBRARY_init_9ops"): None,  # not an identifier
    "_ZL99TORCH_LIBRARY_init_kilnopsRN5torch7LibraryE": None,  # the length runs past the name
    "_ZN4kiln226TORCH_LIBRARY_init_kilnopsE": None,  # 226, not 26: a length is read whole
    "_ZN5torch7Library3defEPKc": None,
    "kiln_plain": None,
}


@pytest.mark.parametrize("symbol", sorted(CASES))
def test_each_registration_symbol_reads_back_as_its_macro_and_namespace(symbol: str) -> None:
    assert parse_init_symbol(symbol) == CASES[symbol]


_NAMESPACE = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True)


@given(kind=st.sampled_from(["TORCH_LIBRARY", "STABLE_TORCH_LIBRARY"]), namespace=_NAMESPACE,
       static=st.booleans(), scoped=st.booleans())
def test_any_namespace_of_a_defining_macro_reads_back(kind: str, namespace: str, static: bool, scoped: bool) -> None:
    identifier = f"{kind}_{'static_' if static else ''}init_{namespace}"
    symbol = _in_namespace(identifier) if scoped else _file_scope(identifier)
    assert parse_init_symbol(symbol) == (kind, namespace)


@given(namespace=_NAMESPACE.filter(lambda n: n.strip("_") != "" and not n.endswith("_")),
       uid=st.integers(0, 10**12))
def test_any_fragment_reads_back_without_its_uid(namespace: str, uid: int) -> None:
    assert parse_init_symbol(_file_scope(f"TORCH_LIBRARY_FRAGMENT_init_{namespace}_{uid}")) == \
        ("TORCH_LIBRARY_FRAGMENT", namespace)


def _registration(path: Path) -> CheckResult | None:
    (library,) = audit_paths([path]).artifacts[0].libraries
    found = [c for c in library.checks if c.id == "registration"]
    return found[0] if found else None


def test_a_library_whose_registration_never_runs_is_told_why(corpus: Corpus) -> None:
    lib = corpus["libregister_lazy.so"]
    check = _registration(lib)
    assert check is not None and not check.ok
    assert check.detail == (f"{lib} references torch's registration API ({INIT_API}) but has no static initializers "
                            "of its own (DT_INIT_ARRAY holds only the C runtime's): its TORCH_LIBRARY blocks never "
                            "run, so its ops never appear.")
    assert check.fix == ("keep the static initializers: do not link the registration objects into a static archive "
                         "that drops them, and do not build with -nostartfiles or a linker script that discards "
                         ".init_array.")


def test_a_registering_library_names_its_api_symbols_and_namespaces(corpus: Corpus) -> None:
    check = _registration(corpus["libregister.so"])
    assert check is not None and check.ok
    assert check.detail == (f"registration initializers present (1 registration API symbol(s) referenced: {INIT_API}; "
                            "TORCH_LIBRARY kilntest)")


def _gxx(tmp: Path, name: str, source: str, *flags: str) -> Path:
    (tmp / f"{name}.cpp").write_text(source)
    subprocess.run(["g++", "-shared", "-fPIC", "-O1", "-o", name, f"{name}.cpp", *flags], check=True,
                   capture_output=True, cwd=tmp)
    return tmp / name


def _many_refs(apis: int) -> str:
    """TORCH_LIBRARY of two namespaces and a fragment of one, and ``apis`` more registration API functions called."""
    names = [f"aoti_torch_library_init_{chr(ord('a') + i)}" for i in range(apis)]
    return ("""
namespace torch { struct Library; namespace detail {
struct TorchLibraryInit { TorchLibraryInit(int kind, void (*fn)(Library&), const char* ns); };
} }
static void TORCH_LIBRARY_init_many(torch::Library&) {}
static void TORCH_LIBRARY_init_more(torch::Library&) {}
static void TORCH_LIBRARY_FRAGMENT_init_many_1(torch::Library&) {}
static const torch::detail::TorchLibraryInit a(0, &TORCH_LIBRARY_init_many, "many");
static const torch::detail::TorchLibraryInit c(0, &TORCH_LIBRARY_init_more, "more");
static const torch::detail::TorchLibraryInit b(1, &TORCH_LIBRARY_FRAGMENT_init_many_1, "many");
""" + "".join(f'extern "C" void {n}();\n' for n in names)
            + '__attribute__((visibility("default"))) void kiln_all() {' + "".join(f" {n}();" for n in names) + " }\n")


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is needed")
@pytest.mark.parametrize(("apis", "shown"), [
    (3, "aoti_torch_library_init_a, aoti_torch_library_init_b, aoti_torch_library_init_c"),
    (4, "aoti_torch_library_init_a, aoti_torch_library_init_b, aoti_torch_library_init_c and more"),
])
def test_several_macros_and_apis_are_each_named(tmp_path: Path, apis: int, shown: str) -> None:
    check = _registration(_gxx(tmp_path, "libmany.so", _many_refs(apis)))
    assert check is not None and check.ok
    assert check.detail == (f"registration initializers present ({apis + 1} registration API symbol(s) referenced: "
                            f"{INIT_API}, {shown}; TORCH_LIBRARY many, more; TORCH_LIBRARY_FRAGMENT many)")


@pytest.mark.skipif(shutil.which("gcc") is None or not (TORCH_LIB / "libc10.so").exists(),
                    reason="gcc and torch's libc10.so are needed")
def test_a_library_that_links_torch_and_registers_nothing_says_so(tmp_path: Path) -> None:
    (tmp_path / "plain.c").write_text("int kiln_plain(int x) { return x; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", "liblinks.so", "plain.c", f"-L{TORCH_LIB}",
                    "-Wl,--no-as-needed", "-lc10"], check=True, capture_output=True, cwd=tmp_path)
    check = _registration(tmp_path / "liblinks.so")
    assert check is not None and check.ok and check.detail == "links torch, registers no operators"
    (tmp_path / "alone.c").write_text("int kiln_alone(int x) { return x; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", "libalone.so", "alone.c"], check=True, cwd=tmp_path)
    assert _registration(tmp_path / "libalone.so") is None  # neither links torch nor registers: not judged


WHEEL_FIX = ("define each namespace with exactly one TORCH_LIBRARY (other files use TORCH_LIBRARY_IMPL or "
             "TORCH_LIBRARY_FRAGMENT), and link the registration sources into the extension the build info "
             "describes.")


def _wheel_check(wheel: Path) -> CheckResult | None:
    found = [c for c in audit_paths([wheel]).artifacts[0].checks if c.id == "registration"]
    return found[0] if found else None


def test_a_wheel_is_told_each_namespace_defined_twice_and_each_listed_one_missing(corpus: Corpus,
                                                                                   tmp_path: Path) -> None:
    lib = corpus["libregister.so"].read_bytes()
    wheel = make_wheel(tmp_path, {"kilntest/libone.so": lib, "kilntest/libtwo.so": lib},
                       build_info={"ops": ["kilntest::twice", "other::x", "no_namespace"]})
    check = _wheel_check(wheel)
    assert check is not None and not check.ok
    assert check.detail == (
        "namespace 'kilntest' is defined (TORCH_LIBRARY) by 2 libraries: kilntest/libone.so, kilntest/libtwo.so; "
        "the second import fails with \"Only a single TORCH_LIBRARY can be used to register the namespace "
        "kilntest\"; the build info lists ops of namespace 'other' but no library in the wheel registers them.")
    assert check.fix == WHEEL_FIX


def test_a_wheel_with_each_namespace_once_names_them_with_their_library(corpus: Corpus, tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, {"kilntest/libone.so": corpus["libregister.so"].read_bytes()},
                       build_info={"ops": ["kilntest::twice"]})
    check = _wheel_check(wheel)
    assert check is not None and check.ok and check.detail == "namespaces: kilntest (kilntest/libone.so)"
    (tmp_path / "plain").mkdir()
    plain = make_wheel(tmp_path / "plain", {"kilntest/libplain.so": corpus["libplain.so"].read_bytes()})
    assert _wheel_check(plain) is None  # no namespace defined or listed: nothing to say


STABLE = """
extern "C" void aoti_torch_library_init_def(void (*fn)(void*), const char* ns);
static void STABLE_TORCH_LIBRARY_init_kilnstable(void*) {}
struct KilnInit { KilnInit() { aoti_torch_library_init_def(&STABLE_TORCH_LIBRARY_init_kilnstable, "kilnstable"); } };
static KilnInit kiln_init;
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is needed")
def test_a_stable_abi_namespace_defined_twice_is_found(tmp_path: Path) -> None:
    data = _gxx(tmp_path, "libstable.so", STABLE).read_bytes()
    wheel = make_wheel(tmp_path, {"kilnstable/liba.so": data, "kilnstable/libb.so": data})
    check = _wheel_check(wheel)
    assert check is not None and not check.ok
    assert check.detail.startswith("namespace 'kilnstable' is defined (TORCH_LIBRARY) by 2 libraries: "
                                   "kilnstable/liba.so, kilnstable/libb.so;"), check.detail


def _fragment(uid: int, macro: str) -> str:
    return f"""
extern "C" void aoti_torch_library_init_fragment(void (*fn)(void*), const char* ns);
static void {macro}_init_kilnfrag_{uid}(void*) {{}}
struct KilnInit {{ KilnInit() {{ aoti_torch_library_init_fragment(&{macro}_init_kilnfrag_{uid}, "kilnfrag"); }} }};
static KilnInit kiln_init;
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is needed")
@pytest.mark.parametrize("macro", ["TORCH_LIBRARY_FRAGMENT", "STABLE_TORCH_LIBRARY_FRAGMENT"])
def test_a_namespace_registered_by_fragments_alone_is_registered(tmp_path: Path, macro: str) -> None:
    """Two libraries, each a TORCH_LIBRARY_FRAGMENT of one namespace (as a setup.py project loads them with
    torch.ops.load_library): the build info's ops are registered, and the namespace is named with both."""
    liba = _gxx(tmp_path, "liba.so", _fragment(0, macro)).read_bytes()
    libb = _gxx(tmp_path, "libb.so", _fragment(1, macro)).read_bytes()
    wheel = make_wheel(tmp_path, {"kilnfrag/liba.so": liba, "kilnfrag/libb.so": libb},
                       build_info={"ops": ["kilnfrag::axpy", "kilnfrag::prefix_sum"]})
    check = _wheel_check(wheel)
    assert check is not None and check.ok, check
    assert check.detail == "namespaces: kilnfrag (fragments in kilnfrag/liba.so, kilnfrag/libb.so)"
    (tmp_path / "none").mkdir()
    missing = make_wheel(tmp_path / "none", {"kilnfrag/liba.so": liba}, build_info={"ops": ["other::x"]})
    check = _wheel_check(missing)
    assert check is not None and not check.ok
    assert "the build info lists ops of namespace 'other' but no library in the wheel registers them" in check.detail


@pytest.fixture
def stripped(corpus: Corpus, tmp_path: Path) -> bytes:
    """libregister.so without .symtab: its namespace is known from the build info and its schema string."""
    lib = tmp_path / "libregister.so"
    shutil.copy(corpus["libregister.so"], lib)
    subprocess.run(["strip", "--strip-all", str(lib)], check=True)
    return lib.read_bytes()


@pytest.mark.parametrize(("ops", "detail"), [
    (["kilntest::twice", "loose_op"], "namespaces: kilntest (kilntest/liba.so)"),  # loose_op names no namespace
    (["kilntest::thrice"], "the build info lists ops of namespace 'kilntest' but no library in the wheel registers "
                           "them."),  # no "thrice(" schema in the library
    (None, None), ("kilntest::twice", None), ({"kilntest::twice": 1}, None),  # not a list: no ops listed
])
def test_a_stripped_library_is_judged_by_the_build_infos_ops(stripped: bytes, tmp_path: Path, ops: object,
                                                             detail: str | None) -> None:
    check = _wheel_check(make_wheel(tmp_path, {"kilntest/liba.so": stripped}, build_info={"ops": ops}))
    if detail is None:
        assert check is None
    else:
        assert check is not None and check.detail == detail


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is needed")
def test_a_wheel_without_build_info_names_each_namespace_it_defines(corpus: Corpus, tmp_path: Path) -> None:
    stable = _gxx(tmp_path, "libstable.so", STABLE).read_bytes()
    wheel = make_wheel(tmp_path, {"kilntest/libone.so": corpus["libregister.so"].read_bytes(),
                                  "kilntest/libstable.so": stable})
    check = _wheel_check(wheel)
    assert check is not None and check.ok
    assert check.detail == "namespaces: kilnstable (kilntest/libstable.so), kilntest (kilntest/libone.so)"


def test_a_stripped_registering_library_names_only_its_api_symbols(stripped: bytes, tmp_path: Path) -> None:
    lib = tmp_path / "libstripped.so"
    lib.write_bytes(stripped)
    check = _registration(lib)
    assert check is not None and check.ok
    assert check.detail == f"registration initializers present (1 registration API symbol(s) referenced: {INIT_API})"


def _damaged_symtab(data: bytes) -> bytes:
    """``data`` (a 64-bit little-endian ELF) with the name of the last .symtab entry pointing past its string table
    (the sections themselves in bounds). The dynamic symbols, where the registration API is referenced, are
    intact."""
    from elftools.elf.elffile import ELFFile

    (symtab,) = [s for s in ELFFile(io.BytesIO(data)).iter_sections() if s["sh_type"] == "SHT_SYMTAB"]
    last = symtab["sh_offset"] + symtab["sh_size"] - symtab["sh_entsize"]
    damaged = bytearray(data)
    struct.pack_into("<I", damaged, last, 0x7FFFFFFF)  # Elf64_Sym.st_name
    return bytes(damaged)


def test_a_registering_library_with_a_damaged_symtab_is_judged_as_a_stripped_one(corpus: Corpus,
                                                                                  tmp_path: Path) -> None:
    """Its init functions cannot be read: its namespace is known from the build info's ops, as for a stripped
    library, and the library's verdict names only its API symbols; neither raises."""
    damaged = _damaged_symtab(corpus["libregister.so"].read_bytes())
    wheel = make_wheel(tmp_path, {"kilntest/liba.so": damaged}, build_info={"ops": ["kilntest::twice"]})
    (artifact,) = audit_paths([wheel]).artifacts
    (check,) = [c for c in artifact.checks if c.id == "registration"]
    assert check.ok and check.detail == "namespaces: kilntest (kilntest/liba.so)"
    (library,) = [c for c in artifact.libraries[0].checks if c.id == "registration"]
    assert library.ok
    assert library.detail == f"registration initializers present (1 registration API symbol(s) referenced: {INIT_API})"


def test_a_symtab_of_an_unusual_entry_size_is_read_not_raised(corpus: Corpus, tmp_path: Path) -> None:
    """A .symtab whose sh_entsize is not the standard Elf64_Sym size (48 here, a multiple of the table's size) is
    read the slow way (pyelftools, at that stride): the library and the wheel are judged, nothing escapes."""
    from elftools.elf.elffile import ELFFile

    data = corpus["libregister.so"].read_bytes()
    elf = ELFFile(io.BytesIO(data))
    (index,) = [i for i, s in enumerate(elf.iter_sections()) if s["sh_type"] == "SHT_SYMTAB"]
    header = elf["e_shoff"] + index * elf["e_shentsize"]
    odd = bytearray(data)
    struct.pack_into("<Q", odd, header + 0x38, 48)  # Elf64_Shdr.sh_entsize
    struct.pack_into("<Q", odd, header + 0x20, elf.get_section(index)["sh_size"] // 48 * 48)  # sh_size
    wheel = make_wheel(tmp_path, {"kilntest/liba.so": bytes(odd)}, build_info={"ops": ["kilntest::twice"]})
    (artifact,) = audit_paths([wheel]).artifacts
    (check,) = [c for c in artifact.checks if c.id == "registration"]
    assert check.ok and check.detail == "namespaces: kilntest (kilntest/liba.so)"
    (library,) = [c for c in artifact.libraries[0].checks if c.id == "registration"]
    assert library.ok and library.detail.startswith("registration initializers present"), library.detail
