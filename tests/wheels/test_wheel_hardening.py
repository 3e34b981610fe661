"""What readelf would show on our own _C, for the CPU and the CUDA wheel."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import parse_wheel_filename

from support.elf_facts import extension_of, read_elf, wheel_text

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", params=["cpu", "cuda"])
def wheel(request: pytest.FixtureRequest) -> Path:
    return request.getfixturevalue(f"{request.param}_wheel")


def test_only_the_module_init_is_exported(wheel: Path) -> None:
    _, data = extension_of(wheel)
    assert read_elf(data).exported == ("PyInit__C",)


def test_runpath_is_origin_relative_and_reaches_torch(wheel: Path) -> None:
    facts = read_elf(extension_of(wheel)[1])
    assert facts.rpath == (), "DT_RPATH must not be used (RUNPATH only)"
    assert facts.runpath[0] == "$ORIGIN"
    assert "$ORIGIN/../torch/lib" in facts.runpath
    assert all(entry.startswith("$ORIGIN") for entry in facts.runpath), facts.runpath


def test_no_text_relocations_and_no_executable_stack(wheel: Path) -> None:
    facts = read_elf(extension_of(wheel)[1])
    assert not facts.textrel
    assert not facts.exec_stack


def test_links_only_what_the_variant_needs(cpu_wheel: Path, cuda_wheel: Path) -> None:
    cpu = read_elf(extension_of(cpu_wheel)[1]).needed
    assert {"libtorch_cpu.so", "libc10.so"} <= set(cpu)
    assert not any("cuda" in lib or "cudart" in lib for lib in cpu), cpu
    assert "libtorch.so" not in cpu and "libtorch_python.so" not in cpu
    cuda = read_elf(extension_of(cuda_wheel)[1]).needed
    assert {"libtorch_cpu.so", "libc10.so", "libc10_cuda.so"} <= set(cuda)
    assert any(lib.startswith("libcudart.so.13") for lib in cuda), cuda
    assert "libtorch_cuda.so" not in cuda, "the kernels need c10_cuda and cudart only"
    assert ".nv_fatbin" in read_elf(extension_of(cuda_wheel)[1]).sections


def _build_info(wheel: Path) -> dict[str, object]:
    return json.loads(wheel_text(wheel, "opkiln/_build_info.json"))


def test_version_and_torch_pin_follow_the_build_torch(cpu_wheel: Path, cuda_wheel: Path) -> None:
    for wheel, local, lo, hi in ((cpu_wheel, "pt213cpu", "2.13", "2.14"), (cuda_wheel, "pt214cu130", "2.14", "2.15")):
        _, version, _, _ = parse_wheel_filename(wheel.name)
        assert version.local == local
        metadata = wheel_text(wheel, ".dist-info/METADATA")
        reqs = [Requirement(line.split(":", 1)[1].strip()) for line in metadata.splitlines()
                if line.startswith("Requires-Dist:")]
        torch = [r for r in reqs if r.name == "torch"]
        assert len(torch) == 1
        spec = torch[0].specifier
        assert spec.contains(f"{lo}.0") and spec.contains(f"{lo}.9")
        assert not spec.contains(f"{hi}.0") and not spec.contains(f"{float(lo) - 0.01:.2f}.9")


def test_build_info_describes_the_build(cpu_wheel: Path, cuda_wheel: Path) -> None:
    schema = "".join(p.read_text() for p in sorted((REPO / "ops").glob("*/binding.cpp")))
    defined = sorted({f"opkiln::{n}" for n in re.findall(r'm\.def\(\s*"([A-Za-z_][A-Za-z0-9_]*)', schema)})
    cpu, cuda = _build_info(cpu_wheel), _build_info(cuda_wheel)
    for info in (cpu, cuda):
        for key in ("version", "torch_version", "cuda_tag", "cuda_archs", "cxx11_abi", "compiler", "flags",
                    "python_tag", "git_commit", "source_hash", "ops"):
            assert key in info, key
        assert info["ops"] == defined
        assert info["cxx11_abi"] is True
        assert re.fullmatch(r"[0-9a-f]{64}", str(info["source_hash"]))
        assert "/work/" not in json.dumps(info) and "/tmp/" not in json.dumps(info), "no absolute paths"
    assert cpu["cuda"] is None and cpu["cuda_tag"] == "cpu" and cpu["cuda_archs"] == []
    matrix = json.loads((REPO / "src" / "kiln_tool" / "data" / "matrix.json").read_text())
    expected = list(matrix["cuda_archs"]["13.0"]["x86_64"])
    expected[-1] += "+PTX"
    assert cuda["cuda"] == "13.0" and cuda["cuda_tag"] == "cu130"
    assert cuda["cuda_archs"] == expected
