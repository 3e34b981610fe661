"""KILN_ABI_MODE=stable: one cp310-abi3 wheel that loads on every torch from the floor on.

One CPU stable wheel is built per session; the same file is checked statically
(name, metadata, build info, abi3audit, kiln audit, what its library imports)
and installed into fresh venvs with torch 2.13.0 and 2.14.1, where the op tests
of tests/ops run against it.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection, GNUVerSymSection
from elftools.elf.sections import SymbolTableSection

from kiln_tool.audit.torch_abi import load_recorded, recorded_versions
from kiln_tool.build_info import op_bindings, op_manifest
from kiln_tool.build_metadata import stable_min_torch
from kiln_tool.project import load_project
from kiln_tool.torch_probe import TorchInstall, find_torch
from support.elf_facts import extension_of, read_elf, wheel_text
from support.venvs import CU130_VENV, site_packages, skip_without_cu130

REPO = Path(__file__).resolve().parents[2]
STABLE_ABI_MIN_TORCH = stable_min_torch(load_project(REPO))

# The stable C shim: C entry points of libtorch, by name (no C++ mangling).
STABLE_SHIM_SYMBOL = re.compile(r"^(aoti_torch_|torch_)[a-z0-9_]+$")
# Anything from torch's C++ namespaces (c10, at, torch, caffe2), mangled: never allowed in this mode.
TORCH_CXX_SYMBOL = re.compile(r"^_ZN[KVRO]*(?:St)?(?:3c10|2at|5torch|6caffe2)")
# Libraries the stable CPU library may need: torch's CPU library (the shim), and the C/C++ runtime.
ALLOWED_NEEDED = {"libtorch_cpu.so", "libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1", "libdl.so.2",
                  "libpthread.so.0", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"}
# Undefined weak symbols every shared object carries (toolchain glue, not imports of ours).
TOOLCHAIN_WEAK = {"_ITM_deregisterTMCloneTable", "_ITM_registerTMCloneTable", "__gmon_start__", "__cxa_finalize"}

pytestmark = pytest.mark.slow


def _schemas(path: Path) -> list[str]:
    return sorted(re.findall(r'\bm\.def\(\s*"([^"]+)"', path.read_text()))


def test_each_schema_is_written_once() -> None:
    """python/opkiln/ops.py serves both builds: each op's schema is written once, in the one binding
    source (ops/<op>/binding.cpp) that both modes compile, and nowhere else under ops/."""
    bindings = sorted((REPO / "ops").glob("*/binding.cpp"))
    assert bindings, "no ops/*/binding.cpp"
    every = [s for p in sorted((REPO / "ops").rglob("*")) if p.is_file() for s in _schemas(p)]
    names = [s.split("(")[0] for s in every]
    assert len(names) == len(set(names)), f"a schema is written twice: {sorted(names)}"
    assert sorted(every) == sorted(s for p in bindings for s in _schemas(p))


def test_wheel_name_metadata_and_build_info(stable_cpu_wheel: Path) -> None:
    base = (REPO / "VERSION").read_text().strip()
    assert re.fullmatch(rf"opkiln-{re.escape(base)}\+cpu-cp310-abi3-linux_x86_64\.whl", stable_cpu_wheel.name)
    metadata = wheel_text(stable_cpu_wheel, ".dist-info/METADATA")
    assert f"Requires-Dist: torch>={STABLE_ABI_MIN_TORCH}\n" in metadata
    assert "Requires-Python: >=3.10" in metadata
    wheel_meta = wheel_text(stable_cpu_wheel, ".dist-info/WHEEL")
    assert "Tag: cp310-abi3-linux_x86_64" in wheel_meta
    info = json.loads(wheel_text(stable_cpu_wheel, "opkiln/_build_info.json"))
    assert info["abi_mode"] == "stable"
    assert info["torch_min"] == STABLE_ABI_MIN_TORCH
    assert info["python_tag"] == "cp310-abi3"
    assert info["extension_suffix"] == "abi3"
    assert info["version"] == f"{base}+cpu"
    assert info["ops"] == op_manifest(op_bindings(REPO), "opkiln")
    name, _ = extension_of(stable_cpu_wheel)
    assert name == "opkiln/_C.abi3.so"


@pytest.mark.parametrize("variant", ["cpu", "cu130"])
def test_abi3audit_finds_nothing(variant: str, request: pytest.FixtureRequest) -> None:
    abi3audit = Path(sys.executable).with_name("abi3audit")
    if not abi3audit.exists():
        pytest.skip(f"abi3audit is not installed in {sys.prefix} (pip install -r requirements/dev.txt)")
    wheel: Path = request.getfixturevalue(f"stable_{variant}_wheel")
    out = subprocess.run([str(abi3audit), "--report", "--strict", str(wheel)], capture_output=True,
                         text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    (spec,) = json.loads(out.stdout)["specs"].values()
    (ext,) = spec["wheel"]
    result = ext["result"]
    assert result["is_abi3"] and result["is_abi3_baseline_compatible"], result
    assert result["baseline"] == "3.10" and result["non_abi3_symbols"] == [], result


def _undefined_symbols(data: bytes) -> dict[str, str | None]:
    """Undefined dynamic symbols of an ELF object -> the version they are bound to (None if unversioned)."""
    elf = ELFFile(io.BytesIO(data))
    versions: dict[int, str] = {}
    verneed = elf.get_section_by_name(".gnu.version_r")
    if isinstance(verneed, GNUVerNeedSection):
        for _, auxiliaries in verneed.iter_versions():
            for aux in auxiliaries:
                versions[aux["vna_other"]] = aux.name
    versym = elf.get_section_by_name(".gnu.version")
    dynsym = elf.get_section_by_name(".dynsym")
    assert isinstance(dynsym, SymbolTableSection)
    out: dict[str, str | None] = {}
    for index, sym in enumerate(dynsym.iter_symbols()):
        if not sym.name or sym["st_shndx"] != "SHN_UNDEF":
            continue
        ndx = versym.get_symbol(index)["ndx"] if isinstance(versym, GNUVerSymSection) else None
        out[sym.name] = versions.get(ndx) if isinstance(ndx, int) else None
    return out


def _exported(lib: Path) -> set[str]:
    with lib.open("rb") as fh:
        dynsym = ELFFile(fh).get_section_by_name(".dynsym")
        assert isinstance(dynsym, SymbolTableSection)
        return {s.name for s in dynsym.iter_symbols() if s.name and s["st_shndx"] != "SHN_UNDEF"}


def _check_imports_only_stable_shim(wheel: Path, runtime_libs: set[str]) -> set[str]:
    """Needs only libtorch_cpu, `runtime_libs` and the C/C++ runtime; every torch symbol it imports is a C
    entry point of the stable shim, exported by torch 2.13 and 2.14 alike; nothing mangled from
    c10/at/torch (Python symbols are abi3audit's). Returns the torch symbols it imports."""
    _, data = extension_of(wheel)
    facts = read_elf(data)
    allowed = ALLOWED_NEEDED | runtime_libs
    assert set(facts.needed) <= allowed, f"unexpected libraries: {set(facts.needed) - allowed}"
    assert "libtorch_cpu.so" in facts.needed
    assert facts.exported == ("PyInit__C",)

    undefined = _undefined_symbols(data)
    cxx_torch = sorted(s for s in undefined if TORCH_CXX_SYMBOL.search(s))
    assert not cxx_torch, f"imports torch C++ symbols: {cxx_torch}"
    unversioned = {s for s, v in undefined.items() if v is None} - TOOLCHAIN_WEAK
    python = {s for s in unversioned if s.startswith(("Py", "_Py"))}
    torch_imports = unversioned - python
    not_shim = sorted(s for s in torch_imports if not STABLE_SHIM_SYMBOL.match(s))
    assert not not_shim, f"imports symbols that are not stable C-shim entry points: {not_shim}"
    assert {"torch_library_impl", "aoti_torch_library_init_def"} <= torch_imports

    _check_exported_by(find_torch(), torch_imports)
    _check_exported_at_the_floor(torch_imports)
    return torch_imports


def _check_exported_by(torch: TorchInstall, torch_imports: set[str]) -> None:
    missing = sorted(torch_imports - _exported(Path(torch.lib_dir) / "libtorch_cpu.so"))
    assert not missing, f"torch {torch.version}'s libtorch_cpu.so does not export {missing}"


def _check_exported_at_the_floor(torch_imports: set[str]) -> None:
    """The stable floor (data/matrix.json) is not installed here: its recorded ABI (data/torch_abi, read from
    its own wheel) must export every shim entry point the library imports, e.g. the fragment registration."""
    at_floor = [v for v in recorded_versions() if v.split("+")[0].rsplit(".", 1)[0] == STABLE_ABI_MIN_TORCH]
    assert at_floor, f"no recorded torch ABI for the stable floor {STABLE_ABI_MIN_TORCH} in data/torch_abi"
    for version in at_floor:
        record = load_recorded(version)
        assert record is not None
        (libtorch_cpu,) = [lib for path, lib in record.libraries.items() if path.endswith("/libtorch_cpu.so")]
        missing = sorted(s for s in torch_imports if not libtorch_cpu.exports(s, None))
        assert not missing, f"torch {version} (the stable floor, recorded) does not export {missing}"


def test_library_imports_only_the_stable_c_shim(stable_cpu_wheel: Path) -> None:
    """... exported by this torch (2.13.0) and by the floor's recorded ABI; 2.14.1: the next test."""
    _check_imports_only_stable_shim(stable_cpu_wheel, set())


def test_torch_2_14_exports_every_shim_entry_point_the_library_imports(stable_cpu_wheel: Path) -> None:
    skip_without_cu130()
    _, data = extension_of(stable_cpu_wheel)
    undefined = _undefined_symbols(data)
    torch_imports = {s for s, v in undefined.items() if v is None and STABLE_SHIM_SYMBOL.match(s)}
    assert {"torch_library_impl", "aoti_torch_library_init_def"} <= torch_imports
    torch = find_torch([str(site_packages(CU130_VENV))])
    assert torch.version.startswith("2.14.1"), torch.version
    _check_exported_by(torch, torch_imports)


def test_cuda_library_needs_no_torch_cuda_library(stable_cu130_wheel: Path) -> None:
    """The CUDA stable library links the CUDA runtime beside libtorch_cpu, and nothing of torch's CUDA
    libraries: the current stream's shim (in libtorch_cuda) is looked up at run time, not imported."""
    torch_imports = _check_imports_only_stable_shim(stable_cu130_wheel, {"libcudart.so.13"})
    _check_exported_by(find_torch([str(site_packages(CU130_VENV))]), torch_imports)
    assert "aoti_torch_get_current_cuda_stream" not in torch_imports
    info = json.loads(wheel_text(stable_cu130_wheel, "opkiln/_build_info.json"))
    assert info["abi_mode"] == "stable" and info["cuda"] == "13.0" and info["torch_min"] == STABLE_ABI_MIN_TORCH
    assert re.fullmatch(r"opkiln-[^-]+\+cu130-cp310-abi3-linux_x86_64\.whl", stable_cu130_wheel.name)


def test_kiln_audit(stable_cpu_wheel: Path) -> None:
    try:
        from kiln_tool.audit import AuditOptions, audit_paths
    except ImportError:
        pytest.skip("kiln audit is not in this tree")
    # A host build needs glibc 2.34 (release wheels come from manylinux_2_28 images).
    report = audit_paths([stable_cpu_wheel], AuditOptions(torch_lib=None, cuda_archs=None, policy="manylinux_2_34"))
    failed = {
        (check["id"], check["detail"])
        for artifact in report.to_json()["artifacts"]
        for check in artifact["checks"] + [c for lib in artifact["libraries"] for c in lib["checks"]]
        if not check["ok"]
    }
    # kiln audit's wheel-tag check expects the per-torch local version (+pt213cpu); the stable
    # mode's is +cpu by design (docs/stable-abi.md). Any other failure is real.
    # The wheel-tag check knows the stable mode's version (+cpu, the CUDA variant only): nothing fails.
    assert not failed, report.render_text()


def test_op_tests_pass_on_each_torch(stable_venv: Path, stable_cpu_wheel: Path) -> None:
    """The same wheel file passes tests/ops (CPU) with torch 2.13.0 and with torch 2.14.1."""
    probe = subprocess.run(
        [str(stable_venv), "-c", "import json, torch, opkiln; "
         "print(json.dumps([torch.__version__, opkiln.build_info()['abi_mode'], opkiln.__file__]))"],
        capture_output=True, text=True, check=True, cwd=stable_venv.parent,
    )
    torch_version, mode, location = json.loads(probe.stdout)
    assert mode == "stable"
    assert Path(location).is_relative_to(stable_venv.parent.parent), location
    # The same expectations as the per-torch run, error types included: the stable build raises
    # RuntimeError, ValueError and IndexError exactly where the per-torch build does.
    out = subprocess.run(
        [str(stable_venv), "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/ops", "-m", "not gpu"],
        capture_output=True, text=True, check=False, cwd=REPO,
    )
    assert out.returncode == 0, f"tests/ops on torch {torch_version}:\n{out.stdout[-6000:]}\n{out.stderr[-3000:]}"


def test_same_wheel_file_everywhere(stable_cpu_wheel: Path) -> None:
    """One file for every CPython >= 3.10: its only extension is abi3, and it lists no other."""
    with zipfile.ZipFile(stable_cpu_wheel) as zf:
        sos = [n for n in zf.namelist() if n.endswith(".so")]
    assert sos == ["opkiln/_C.abi3.so"]
