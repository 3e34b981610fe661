"""`kiln new-op --kind`: every kind of op the scaffold knows (KINDS), its schemas from one function each,
and the check that an op's schema and the places that repeat its arguments agree (trimming is checked)."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln_tool.cli import main
from kiln_tool.new_op import (
    KINDS,
    ROI_EXTRAS,
    ROI_PARAMS,
    NewOpError,
    disagreements,
    plan,
    roi_schemas,
    rowwise_schemas,
    torchvision_class_name,
    write,
)

REPO = Path(__file__).resolve().parents[2]
OPS_PY = Path("python", "opkiln", "ops.py")


def _checkout(root: Path) -> Path:
    shutil.copytree(REPO / "ops", root / "ops")
    (root / OPS_PY).parent.mkdir(parents=True)
    shutil.copy2(REPO / OPS_PY, root / OPS_PY)
    (root / "tests" / "ops").mkdir(parents=True)
    return root


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _defs(binding: Path) -> list[str]:
    return ["".join(re.findall(r'"([^"]*)"', call)) for call in re.findall(r"m\.def\((.*?)\);", binding.read_text(),
                                                                             re.DOTALL)]


def test_help_lists_every_kind_with_what_it_is(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["new-op", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "{" + ",".join(KINDS) + "}" in out
    for kind, what in KINDS.items():
        assert f"{kind} {' '.join(what.split())[:40]}" in out


def _family_members(macro: str) -> list[Path]:
    return sorted(b for b in (REPO / "ops").glob("*/binding.cpp") if f"{macro}(" in b.read_text())


def _assert_a_family_schema(binding: Path) -> None:
    """What an RoI-family op registers is one of roi_schemas' variants: the index output named as the op
    names it, and its own parameters (any after pooled_width but the family's) as it names them."""
    defs = _defs(binding)
    index = re.search(r"Tensor rois, Tensor (\w+),", defs[-1]) if len(defs) == 2 else None
    args = re.fullmatch(r"\w+\((.*)\) -> .*", defs[0])
    assert args is not None, defs
    family = {*ROI_PARAMS.split(", "), *ROI_EXTRAS}
    own = [a for a in args.group(1).split(", ") if a not in family]
    variants = [list(roi_schemas(binding.parent.name, sr, al, index.group(1) if index else None, own))
                for sr in (False, True) for al in (False, True)]
    assert defs in variants


@pytest.mark.parametrize("binding", _family_members("OPKILN_ROI_FAMILY_KERNELS"), ids=lambda b: b.parent.name)
def test_every_roi_family_member_registers_a_family_schema(binding: Path) -> None:
    """One source of truth: what an RoI-family op registers is one of roi_schemas' variants."""
    _assert_a_family_schema(binding)


def test_the_tree_agrees_with_its_schemas() -> None:
    assert disagreements(REPO) == []


# Every kind and variant the scaffold writes: (kind, --schema or None, --backward), and the roi kind's box
# layout and own parameters (OPTIONS: plan's keywords).
ROI_FULL = roi_schemas("demo", sampling_ratio=True, aligned=True, index="index")[0]
OWN = ["clockwise:bool=False", "k:int=-9223372036854775808", "eps:float=1e-06"]
OPTIONS: dict[str, dict[str, Any]] = {
    "roi-rotated": {"box_layout_text": "rotated", "params": OWN[:1]},
    "roi-index-columns-params": {"box_columns": "4", "params": OWN},
}
VARIANTS = {
    "elementwise": ("elementwise", None, False),
    "elementwise-backward": ("elementwise",
                             "demo(Tensor input, Tensor rois, float scale, int size) -> (Tensor, Tensor)", True),
    "rowwise": ("rowwise", None, False),
    "rowwise-backward": ("rowwise", None, True),
    "roi": ("roi", None, True),
    "roi-index-aligned": ("roi", ROI_FULL, True),
    "ps-roi": ("ps-roi", None, True),
    "roi-rotated": ("roi", roi_schemas("demo", True, True, None, ["bool clockwise"])[0], True),
    "roi-index-columns-params": ("roi", roi_schemas("demo", False, False, "index",
                                                    ["bool clockwise", "int k", "float eps"])[0], True),
}


@pytest.fixture(scope="module")
def scaffolded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    trees = {}
    for label, (kind, schema, backward) in VARIANTS.items():
        root = _checkout(tmp_path_factory.mktemp(label) / "tree")
        write(plan("demo", root, schema, backward, kind, **OPTIONS.get(label, {})))
        trees[label] = root
    return trees


@pytest.mark.parametrize("label", VARIANTS)
def test_every_kind_scaffolds_an_op_that_agrees_with_its_schemas(scaffolded: dict[str, Path], label: str) -> None:
    root = scaffolded[label]
    assert disagreements(root) == []
    for path in [*(root / "ops" / "demo").iterdir(), root / "tests" / "ops" / "test_demo.py"]:
        long = [n for n, line in enumerate(path.read_text().splitlines(), 1)
                if len(line) > 120 and not line.lstrip().startswith(("//", "#"))]
        assert long == [], f"{path.name}: lines {long} longer than 120"
    ast.parse((root / "tests" / "ops" / "test_demo.py").read_text())
    ast.parse((root / OPS_PY).read_text())
    if VARIANTS[label][0] == "roi":
        _assert_a_family_schema(root / "ops" / "demo" / "binding.cpp")


@pytest.mark.parametrize("label", VARIANTS)
def test_every_kind_scaffolds_python_that_passes_ruff(scaffolded: dict[str, Path], label: str) -> None:
    """The generated wrapper (ops.py with its section) and test pass the project's ruff rules as written."""
    root = scaffolded[label]
    paths = [str(root / OPS_PY), str(root / "tests" / "ops" / "test_demo.py")]
    found = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise",
                            "--config", str(REPO / "pyproject.toml"), *paths],
                           capture_output=True, text=True, check=False)
    assert found.returncode == 0, found.stdout + found.stderr


def _edit(path: Path, old: str, new: str) -> None:
    """Replaces `old` in the demo op's part of `path` (ops.py: its section, at the end)."""
    text = path.read_text()
    at = text.index("---- demo") if path.name == "ops.py" else 0
    assert old in text[at:], (path, old)
    path.write_text(text[:at] + text[at:].replace(old, new, 1))


# Trimming in one place only: each edit makes the op disagree with itself, and the check names where.
TRIMS = {
    # elementwise --backward: the backward schema loses an argument, the rest does not
    "schema": ("elementwise-backward", "ops/demo/binding.cpp", '"Tensor out0, Tensor out1) -> Tensor"',
               '"Tensor out0) -> Tensor"', "ops/demo/binding.cpp: demo_backward_cpu("),
    "fake impl": ("elementwise-backward", str(OPS_PY), "out0: Tensor, out1: Tensor) -> Tensor:",
                  "out0: Tensor) -> Tensor:", "_demo_backward_fake(grad_out0"),
    "gradients": ("elementwise-backward", str(OPS_PY), "return grad_input, None, None, None",
                  "return grad_input, None, None", "returns 3 gradients"),
    "setup": ("elementwise-backward", str(OPS_PY), "input, rois, scale, size = inputs", "input, rois, scale = inputs",
              "unpacks 3 inputs"),
    "backward call": ("elementwise-backward", str(OPS_PY), "ctx.scalars[1], out0, out1)", "ctx.scalars[1], out0)",
                      "a call of _demo_backward passes 7 arguments"),
    "roi binding": ("roi", "ops/demo/binding.cpp", "std::int64_t pooled_width, std::int64_t batch",
                    "std::int64_t batch", "backward(const Tensor&, const Tensor&, double, std::int64_t, std::int64_t,"),
    "ps-roi binding": ("ps-roi", "ops/demo/binding.cpp", "std::int64_t pooled_width, std::int64_t batch_size",
                       "std::int64_t batch_size", "is registered for _demo_backward"),
    # an op's own parameter dropped from its forward's C++ parameters, or from its fake impl
    "roi param binding": ("roi-rotated", "ops/demo/binding.cpp", "bool aligned, bool clockwise) {", "bool aligned) {",
                          "is registered for demo but its schema takes"),
    "roi param fake": ("roi-rotated", str(OPS_PY), "sampling_ratio: int, aligned: bool, clockwise: bool) -> Tensor:",
                       "sampling_ratio: int, aligned: bool) -> Tensor:", "is the fake impl of demo"),
    "rowwise fake": ("rowwise-backward", str(OPS_PY), "weight: Tensor, stat: Tensor)", "weight: Tensor)",
                     "is the fake impl of _demo_backward"),
}


@pytest.mark.parametrize("trim", TRIMS)
def test_a_trim_in_one_place_is_found(tmp_path: Path, scaffolded: dict[str, Path], trim: str) -> None:
    label, rel, old, new, said = TRIMS[trim]
    root = tmp_path / "tree"
    shutil.copytree(scaffolded[label], root)
    _edit(root / rel, old, new)
    found = disagreements(root)
    assert any(said in f for f in found), found  # the place that disagrees now (others may be named too)


def test_roi_schemas_choose_the_families_variants_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _checkout(tmp_path / "tree")
    before = _snapshot(root)
    for kind, schema in [("roi", "demo(Tensor input, Tensor rois, float spatial_scale, int pooled_height) -> Tensor"),
                         ("roi", roi_schemas("demo", aligned=True, sampling_ratio=False)[0].replace("bool", "int")),
                         ("rowwise", "demo(Tensor x, float eps) -> (Tensor, Tensor)")]:
        assert main(["new-op", "demo", "--kind", kind, "--root", str(root), "--schema", schema]) == 2
        err = capsys.readouterr().err
        assert "the family's schema" in err and err.count("\n") == 1 and "nothing written" in err
    assert _snapshot(root) == before
    assert main(["new-op", "demo", "--kind", "roi", "--root", str(root), "--schema", "  " + ROI_FULL]) == 0
    assert _defs(root / "ops" / "demo" / "binding.cpp") == list(roi_schemas("demo", True, True, "index"))
    assert rowwise_schemas("demo", False) == (rowwise_schemas("demo", True)[0],)


@pytest.fixture(scope="module")
def names_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _checkout(tmp_path_factory.mktemp("kinds-names") / "tree")


_KIND_TEXT = st.one_of(st.sampled_from([*KINDS, "ps_roi", "Roi", "row-wise", ""]), st.text(max_size=8))
_SCHEMAS = st.one_of(st.none(), st.sampled_from([ROI_FULL, rowwise_schemas("demo", True)[0],
                                                 "demo(Tensor x) -> Tensor"]), st.text(max_size=30))


@settings(max_examples=200, deadline=None)
@given(name=st.one_of(st.just("demo"), st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True), st.text(max_size=6)),
       kind=_KIND_TEXT, schema=_SCHEMAS, backward=st.booleans())
def test_any_input_is_refused_in_one_line_or_scaffolds_every_file(names_tree: Path, name: str, kind: str,
                                                                  schema: str | None, backward: bool) -> None:
    before = _snapshot(names_tree)
    try:
        p = plan(name, names_tree, schema, backward, kind)
    except NewOpError as exc:
        assert "\n" not in str(exc) and str(exc)
        assert _snapshot(names_tree) == before
        if kind not in KINDS:
            assert str(exc).startswith(f"unknown kind {kind!r}")
        return
    assert kind in KINDS and _snapshot(names_tree) == before
    assert {f.name for f in p.new_files} == {f"{name}.h", f"{name}_cpu.cpp", f"{name}_cuda.cu", "binding.cpp",
                                             f"test_{name}.py"}
    assert all("$" not in text for text in [*p.new_files.values(), p.ops_py_text]), "template left over"
    ast.parse(p.ops_py_text)


def test_a_bad_kind_exits_2_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _checkout(tmp_path / "tree")
    before = _snapshot(root)
    assert main(["new-op", "demo", "--kind", "pooling", "--root", str(root)]) == 2
    err = capsys.readouterr().err
    assert err == "kiln new-op: unknown kind 'pooling'; one of elementwise, rowwise, roi, ps-roi; nothing written\n"
    assert _snapshot(root) == before


@pytest.mark.parametrize(("name", "cls"), [("roi_align", "RoIAlign"), ("roi_pool", "RoIPool"),
                                           ("ps_roi_align", "PSRoIAlign"), ("ps_roi_pool", "PSRoIPool"),
                                           ("roi_align_rotated", "RoIAlignRotated"), ("box_iou", "BoxIou")])
def test_module_classes_are_spelled_as_torchvisions(name: str, cls: str) -> None:
    assert torchvision_class_name(name) == cls


@pytest.mark.parametrize(("kind", "name", "cls"), [("roi", "roi_align_rotated", "RoIAlignRotated"),
                                                   ("ps-roi", "ps_roi_sum", "PSRoISum")])
def test_a_scaffolded_family_op_names_its_module_as_torchvision_would(tmp_path: Path, kind: str, name: str,
                                                                      cls: str) -> None:
    p = plan(name, _checkout(tmp_path / "tree"), kind=kind)
    tree = ast.parse(p.ops_py_text)
    classes = [n.name for n in tree.body if isinstance(n, ast.ClassDef)]
    assert cls in classes and f'"{cls}"' in p.ops_py_text.split("]", 1)[0]  # the class, and in __all__
    test_text = p.new_files[p.root / "tests" / "ops" / f"test_{name}.py"]
    assert f"ops.{cls}(" in test_text
