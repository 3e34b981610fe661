"""ringops (tests/adopters/projects/ringops): a TORCH_LIBRARY package with a CPU and a CUDA kernel, built with
kiln's CMake API (8 lines of CMake) from a fresh clone by the installed tool: `kiln wheels` gives a repaired,
labelled and pinned wheel that `kiln audit` passes, `kiln repro` rebuilds it byte for byte, and installed
beside torch 2.13.0 in a fresh venv its op gives torch.roll's results. The CUDA variant (torch 2.14.1, nvcc
13.0) compiles without a GPU: its wheel holds a cubin for each arch of the matrix, and PTX for the last.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from adopters.adopting import (
    Built,
    KilnTool,
    assert_repro_rebuilds,
    audit_json,
    build_info,
    failed_checks,
    fatbin_entries,
    head_commit,
    libraries_in,
    record_problems,
    run_python,
    timed,
    user_venv,
    wheel_metadata,
    zip_times,
)

pytestmark = pytest.mark.slow

PACKAGE = "ringops"
COMMIT_TIME = (2026, 11, 30, 12, 0, 0)


def torch_pin(wheel: Path) -> SpecifierSet:
    requirements = [Requirement(r) for r in wheel_metadata(wheel).get("Requires-Dist", [])]
    (torch,) = [r for r in requirements if r.name == "torch"]
    return torch.specifier


def check_labelled_wheel(wheel: Path, clone: Path, label: str, pin: str) -> None:
    assert wheel.name.startswith(f"ringops-0.3.0+{label}-cp311-cp311-manylinux_"), wheel.name
    metadata = wheel_metadata(wheel)
    assert metadata["Name"] == ["ringops"] and metadata["Version"] == [f"0.3.0+{label}"], metadata
    assert torch_pin(wheel) == SpecifierSet(pin), metadata.get("Requires-Dist")
    assert record_problems(wheel) == []
    info = build_info(wheel, PACKAGE)
    assert {k: info[k] for k in ("project", "package", "namespace", "build", "libraries", "version", "ops")} == {
        "project": "ringops", "package": "ringops", "namespace": "ringops", "build": "kiln",
        "libraries": "python-module", "version": f"0.3.0+{label}", "ops": ["ringops::ring_shift"]}
    assert info["git_commit"] == head_commit(clone), "the build info names the clone's commit"
    assert zip_times(wheel) == {COMMIT_TIME}, "every member dated at the commit (SOURCE_DATE_EPOCH)"
    assert list(libraries_in(wheel, PACKAGE)) == ["ringops/_C.cpython-311-x86_64-linux-gnu.so"]


def test_kiln_wheels_places_one_labelled_pinned_repaired_wheel(ringops_cpu: Built, ringops_clone: Path) -> None:
    wheel = ringops_cpu.wheel("pt213cpu")
    check_labelled_wheel(wheel, ringops_clone, "pt213cpu", ">=2.13,<2.14")
    assert (ringops_clone / ".venvs").is_dir(), "the build venvs live in the project"


def test_kiln_audit_passes_it(kiln_tool: KilnTool, ringops_cpu: Built) -> None:
    status, report = audit_json(kiln_tool, ringops_cpu.wheel("pt213cpu"))
    assert status == 0 and report["ok"] and report["errors"] == 0, failed_checks(report)
    (artifact,) = report["artifacts"]
    # Checked against the torch it was built for (recorded in the tool), not skipped for want of one.
    assert "2.13.0" in json.dumps(artifact["target"]), artifact["target"]


def test_kiln_repro_rebuilds_the_wheel_byte_for_byte(kiln_tool: KilnTool, ringops_cpu: Built,
                                                     ringops_clone: Path) -> None:
    assert_repro_rebuilds(kiln_tool, ringops_clone, ringops_cpu, "pt213cpu",
                          "ringops: kiln repro --once (cpu: one build elsewhere against dist/)")


def test_installed_beside_torch_213_its_op_is_torch_roll(ringops_cpu: Built, tmp_path: Path) -> None:
    wheel = ringops_cpu.wheel("pt213cpu")
    with timed("ringops: a user's venv (torch 2.13.0 + the wheel)"):
        python = user_venv(tmp_path / "user", "2.13.0", [wheel])
    pip_check = subprocess.run([str(python), "-m", "pip", "check"], capture_output=True, text=True, check=False)
    assert pip_check.returncode == 0, f"the torch pin is not met by torch 2.13.0: {pip_check.stdout}"
    code = """
import importlib.metadata, torch, ringops
assert importlib.metadata.version("ringops") == "0.3.0+pt213cpu"
generator = torch.Generator().manual_seed(0)
x = torch.randn(4, 3, 11, generator=generator)
for shift in (-23, -1, 0, 1, 5, 11, 30):
    torch.testing.assert_close(ringops.ring_shift(x, shift), torch.roll(x, shift, -1), rtol=0, atol=0)
strided = x.transpose(0, 2)
torch.testing.assert_close(torch.ops.ringops.ring_shift(strided, 2), torch.roll(strided, 2, -1), rtol=0, atol=0)
try:
    ringops.ring_shift(x.double(), 1)
except RuntimeError as exc:
    assert "float32 tensors only" in str(exc), exc
else:
    raise AssertionError("a float64 tensor was accepted")
try:
    import opkiln
except ModuleNotFoundError:
    print("ok")
"""
    proc = run_python(python, code, tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout + proc.stderr


# --- the CUDA variant ------------------------------------------------------------------------------------------

def _matrix_archs(tool: KilnTool) -> list[str]:
    """The CUDA 13.0 x86_64 arch list of the installed tool's own matrix (what tool.kiln.matrix = "kiln" means)."""
    code = ("import json; from kiln_tool.resources import data_path; "
            "print(json.dumps(json.loads(data_path('matrix.json').read_text())['cuda_archs']['13.0']['x86_64']))")
    proc = subprocess.run([str(tool.venv / "bin" / "python"), "-c", code], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    archs: list[str] = json.loads(proc.stdout)
    return archs


@pytest.fixture(scope="module")
def cu130_wheel(request: pytest.FixtureRequest) -> Path:
    if shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists():
        pytest.skip("no nvcc on this machine: the CUDA variant cannot be compiled here")
    built: Built = request.getfixturevalue("ringops_cu130")
    return built.wheel("pt214cu130")


def test_the_cuda_variant_is_labelled_and_pinned_for_torch_214(cu130_wheel: Path, ringops_clone: Path) -> None:
    check_labelled_wheel(cu130_wheel, ringops_clone, "pt214cu130", ">=2.14,<2.15")
    info = build_info(cu130_wheel, PACKAGE)
    assert info["cuda_tag"] == "cu130" and str(info["cuda"]).startswith("13.0"), info


def test_the_cuda_variant_holds_a_cubin_for_each_arch_of_the_matrix(kiln_tool: KilnTool, cu130_wheel: Path) -> None:
    archs = [int(a.replace(".", "")) for a in _matrix_archs(kiln_tool)]
    (library,) = libraries_in(cu130_wheel, PACKAGE).values()
    entries = fatbin_entries(library)
    assert sorted({sm for kind, sm in entries if kind == "cubin"}) == sorted(archs), entries
    assert {sm for kind, sm in entries if kind == "ptx"} == {max(archs)}, entries
    status, report = audit_json(kiln_tool, cu130_wheel)
    assert status == 0 and report["ok"], failed_checks(report)
    (artifact,) = report["artifacts"]
    (audited,) = artifact["libraries"]
    assert sorted(audited["cuda_manifest"]["sass"]) == sorted(f"sm_{a}" for a in archs), audited["cuda_manifest"]
