"""`kiln new-op NAME --kind ps-roi`: a member of the position-sensitive RoI family (ops/common/ps_roi.h) is its
per-bin math; the schema, binding, wrapper in torchvision's signature and Python registration are the family's."""

import ast
import re
import subprocess
from pathlib import Path

import pytest

from kiln_tool.cli import main
from kiln_tool.new_op import ps_roi_schemas

REPO = Path(__file__).resolve().parents[2]
FAMILY = {"ps_roi_align": True, "ps_roi_pool": False}  # op -> takes sampling_ratio


def _defs(binding: Path) -> list[str]:
    """The schemas a binding's m.def(...) calls register (adjacent C++ literals joined)."""
    return ["".join(re.findall(r'"([^"]*)"', call)) for call in re.findall(r"m\.def\((.*?)\);", binding.read_text(),
                                                                             re.DOTALL)]


@pytest.mark.parametrize(("op", "sampling_ratio"), FAMILY.items())
def test_the_family_ops_register_the_family_schemas(op: str, sampling_ratio: bool) -> None:
    """One source of truth: the scaffold's schemas are what the family's ops register, forward and backward."""
    assert _defs(REPO / "ops" / op / "binding.cpp") == list(ps_roi_schemas(op, sampling_ratio))


def _checkout(root: Path) -> Path:
    subprocess.run(["cp", "-r", str(REPO / "ops"), str(root / "ops")], check=True)
    (root / "python" / "opkiln").mkdir(parents=True)
    (root / "python" / "opkiln" / "ops.py").write_text((REPO / "python" / "opkiln" / "ops.py").read_text())
    (root / "tests" / "ops").mkdir(parents=True)
    return root


@pytest.mark.parametrize("sampling_ratio", [False, True])
def test_a_ps_roi_op_is_its_per_bin_math(tmp_path: Path, sampling_ratio: bool) -> None:
    root = _checkout(tmp_path)
    schema = ["--schema", ps_roi_schemas("ps_demo", True)[0]] if sampling_ratio else []
    assert main(["new-op", "ps_demo", "--kind", "ps-roi", "--root", str(root), *schema]) == 0
    folder = root / "ops" / "ps_demo"
    assert _defs(folder / "binding.cpp") == list(ps_roi_schemas("ps_demo", sampling_ratio))
    assert "ps_roi_forward<kernels::PsDemo>" in (folder / "binding.cpp").read_text()
    assert (folder / "ps_demo_cpu.cpp").read_text().rstrip().endswith("OPKILN_PS_ROI_CPU(PsDemo);")
    assert (folder / "ps_demo_cuda.cu").read_text().rstrip().endswith("OPKILN_PS_ROI_CUDA(PsDemo);")
    assert "kNotWritten" in (folder / "ps_demo.h").read_text()
    ops_py = (root / "python" / "opkiln" / "ops.py").read_text()
    assert '_register_position_sensitive("ps_demo")' in ops_py and "class PSDemo(nn.Module):" in ops_py
    (wrapper,) = [n for n in ast.parse(ops_py).body if isinstance(n, ast.FunctionDef) and n.name == "ps_demo"]
    assert ast.unparse(wrapper.args) == ("input: Tensor, boxes: Tensor, output_size: int, spatial_scale: float=1.0"
                                         + (", sampling_ratio: int=-1" if sampling_ratio else ""))
    if not sampling_ratio:
        return  # one compile of a scaffolded op is enough (it costs seconds)
    compiled = subprocess.run(["g++", "-std=c++20", "-fsyntax-only", "-Wall", "-Werror", f"-I{root / 'ops'}",
                               str(folder / "ps_demo_cpu.cpp")], capture_output=True, text=True, check=False)
    assert compiled.returncode == 0, compiled.stderr


def test_another_schema_is_refused_and_nothing_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _checkout(tmp_path)
    before = (root / "python" / "opkiln" / "ops.py").read_text()
    schema = "ps_demo(Tensor input, Tensor rois, float spatial_scale, int pooled_height) -> (Tensor, Tensor)"
    assert main(["new-op", "ps_demo", "--kind", "ps-roi", "--root", str(root), "--schema", schema]) == 2
    assert "the family's schema" in capsys.readouterr().err
    assert not (root / "ops" / "ps_demo").exists() and (root / "python" / "opkiln" / "ops.py").read_text() == before
