"""cxx11-abi (audit/checks/abi.py): which mangled torch symbols use which _GLIBCXX_USE_CXX11_ABI (through the
C++ runtime's demangler, and by the mangled name alone where there is none), and the words of the verdict on
a library g++ built with the other ABI than the target torch's."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from audit_corpus import TORCH_LIB, Corpus

from kiln_tool.audit import AuditOptions, CheckResult, audit_paths
from kiln_tool.audit.checks import abi

OLD_STRING = "_ZN3c109kiln_warnERKSs"
NEW_STRING = "_ZN3c109kiln_warnERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"
CASES = {
    OLD_STRING: 0,
    NEW_STRING: 1,
    "_ZN3c104kilnERKSt4listIiSaIiEE": 0,  # std::list, old
    "_ZN3c104kilnERKNSt7__cxx114listIiSaIiEEE": 1,  # std::list, new
    "_ZN3c104kilnB5cxx11Ev": 1,  # the abi:cxx11 tag on a function returning a string
    "_ZN3c104kilnEv": None,  # no string or list in it
    "_ZN3c104SsxyEv": None,  # "Ss" inside an identifier (c10::Ssxy) is no std::string
    "_ZN2at4kilnERKSt12basic_stringIwSt11char_traitsIwESaIwEE": 0,  # std::wstring spelled out, old
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_symbol_has_the_abi_its_string_and_list_types_say(name: str) -> None:
    if abi._demangler() is None:
        pytest.skip("no C++ runtime demangler here")
    assert abi.symbol_abi(name) == CASES[name]


@pytest.mark.parametrize("name", sorted(CASES))
def test_without_a_demangler_the_mangled_name_decides_alike(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(abi, "_demangler", lambda: None)
    assert abi.symbol_abi(name) == CASES[name]


def test_the_demangler_reads_what_the_mangled_name_alone_cannot() -> None:
    """c10::__cxx11::foo() is a namespace that happens to be called __cxx11, no std:: type of either ABI: the
    demangled name says so; the mangled name alone (the fallback where there is no demangler) takes it for the
    new ABI."""
    if abi._demangler() is None:
        pytest.skip("no C++ runtime demangler here")
    assert abi.symbol_abi("_ZN3c107__cxx113fooEv") is None


def test_the_demangler_reads_a_name_and_refuses_a_non_name() -> None:
    demangle = abi._demangler()
    if demangle is None:
        pytest.skip("no C++ runtime demangler here")
    assert demangle(OLD_STRING) == "c10::kiln_warn(std::string const&)"
    assert demangle("not a mangled name") is None


def _abi_check(lib: Path, **options: object) -> CheckResult:
    (library,) = audit_paths([lib], AuditOptions(**options)).artifacts[0].libraries  # type: ignore[arg-type]
    (check,) = [c for c in library.checks if c.id == "cxx11-abi"]
    return check


@pytest.fixture(scope="module")
def old_abi_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _old_abi(tmp_path_factory, 7)


def _old_abi(tmp_path_factory: pytest.TempPathFactory, count: int) -> Path:
    """A library of ``count`` c10:: functions taking a std::string, built with the old ABI."""
    if shutil.which("g++") is None:
        pytest.skip("g++ is needed")
    tmp = tmp_path_factory.mktemp("abi")
    functions = "".join(f'__attribute__((visibility("default"))) int kiln_f{i}(const std::string& s) '
                        f"{{ return (int)s.size() + {i}; }}\n" for i in range(count))
    (tmp / "many.cpp").write_text("#include <string>\nnamespace c10 {\n" + functions + "}\n"
                                  'extern "C" __attribute__((visibility("default"))) int kiln_c(void) { return 0; }\n')
    subprocess.run(["g++", "-shared", "-fPIC", "-O1", "-D_GLIBCXX_USE_CXX11_ABI=0", "-o", "libmany.so", "many.cpp"],
                   check=True, capture_output=True, cwd=tmp)
    return tmp / "libmany.so"


def test_a_library_of_the_other_abi_is_told_the_count_five_names_and_the_fix(old_abi_library: Path) -> None:
    if not (TORCH_LIB / "libc10.so").exists():
        pytest.skip("no torch in this interpreter")
    check = _abi_check(old_abi_library, torch_lib=TORCH_LIB)
    assert not check.ok
    match = re.fullmatch(
        rf"{re.escape(str(old_abi_library))}: 7 torch symbol\(s\) use _GLIBCXX_USE_CXX11_ABI=0 but the target torch "
        r"uses 1 \((torch [^)]+'s libc10\.so)\): (.+) and 2 more\. They will not resolve at import\.", check.detail)
    assert match, check.detail
    shown = match.group(2).split(", ")
    assert len(shown) == 5 and set(shown) <= {f"_ZN3c107kiln_f{i}ERKSs" for i in range(7)}
    assert check.fix == ("compile with -D_GLIBCXX_USE_CXX11_ABI=1 (take it from torch._C._GLIBCXX_USE_CXX11_ABI of "
                         "the torch you build against), and do not mix objects built for another torch.")


def test_a_library_without_torch_symbols_has_nothing_to_check(corpus: Corpus) -> None:
    # No torch symbol whose mangling the setting changes (a plain C library, an old-ABI shim of its own): the pass
    # text never speaks of torch symbols it does not have, with or without a target torch.
    for torch_lib in (None, TORCH_LIB if (TORCH_LIB / "libc10.so").exists() else None):
        check = _abi_check(corpus["libplain.so"], torch_lib=torch_lib)
        assert check.ok and check.detail == ("nothing to check: no torch symbol here whose mangling depends on "
                                             "_GLIBCXX_USE_CXX11_ABI")


def test_the_abi_is_not_judged_without_a_target(old_abi_library: Path) -> None:
    check = _abi_check(old_abi_library)
    assert check.ok
    assert check.detail == ("not checked: the target torch's _GLIBCXX_USE_CXX11_ABI is unknown (a loose library has "
                            "no build info: pass --torch-lib DIR)")


def test_a_library_of_the_target_abi_passes_and_says_which(corpus: Corpus) -> None:
    if not (TORCH_LIB / "libc10.so").exists():
        pytest.skip("no torch in this interpreter")
    check = _abi_check(corpus["libnewabi.so"], torch_lib=TORCH_LIB)
    assert check.ok
    assert re.fullmatch(r"1 torch symbol\(s\) whose mangling depends on it use _GLIBCXX_USE_CXX11_ABI=1 \(torch "
                        r"[^)]+'s libc10\.so\)", check.detail)


def test_against_an_old_abi_torch_the_verdicts_turn_around(old_abi_library: Path, corpus: Corpus) -> None:
    """torch built with _GLIBCXX_USE_CXX11_ABI=0 (the pre-2.7 pip wheels): old-ABI symbols pass, new ones fail."""
    from types import SimpleNamespace

    from kiln_tool.audit.elf import ElfLibrary

    def check(path: Path) -> CheckResult:
        ctx = SimpleNamespace(lib=ElfLibrary.open(path), member=path.name)
        return abi.check_cxx11_abi(ctx, False, "an old torch")  # type: ignore[arg-type]

    passed = check(old_abi_library)
    assert passed.ok and passed.detail.endswith("torch symbol(s) whose mangling depends on it use "
                                                "_GLIBCXX_USE_CXX11_ABI=0 (an old torch)")
    failed = check(corpus["libnewabi.so"])
    assert not failed.ok
    assert failed.detail == ("libnewabi.so: 1 torch symbol(s) use _GLIBCXX_USE_CXX11_ABI=1 but the target torch uses 0 "
                             f"(an old torch): {NEW_STRING}. They will not resolve at import.")
    assert "-D_GLIBCXX_USE_CXX11_ABI=0 " in failed.fix


def test_five_wrong_symbols_are_all_shown(tmp_path_factory: pytest.TempPathFactory) -> None:
    if not (TORCH_LIB / "libc10.so").exists():
        pytest.skip("no torch in this interpreter")
    lib = _old_abi(tmp_path_factory, 5)
    check = _abi_check(lib, torch_lib=TORCH_LIB)
    shown = check.detail.split("): ", 1)[1].removesuffix(". They will not resolve at import.")
    assert sorted(shown.split(", ")) == [f"_ZN3c107kiln_f{i}ERKSs" for i in range(5)], check.detail
