"""`kiln new-op NAME`: the skeleton docs/adding-an-op.md starts from; refuses bad names, writes all or nothing."""

from __future__ import annotations

import ast
import keyword
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln_tool.cli import main
from kiln_tool.new_op import CXX_KEYWORDS, NewOpError, disagreements, existing_ops, plan, roi_schemas, write

REPO = Path(__file__).resolve().parents[2]
GENERATED = ["ops/{op}/{op}.h", "ops/{op}/{op}_cpu.cpp", "ops/{op}/{op}_cuda.cu", "ops/{op}/binding.cpp",
             "tests/ops/test_{op}.py"]


def _checkout(root: Path) -> Path:
    """The parts of the tree new-op reads and writes: ops/ and python/opkiln/ops.py, tests/ops/."""
    shutil.copytree(REPO / "ops", root / "ops")
    (root / "python" / "opkiln").mkdir(parents=True)
    shutil.copy2(REPO / "python" / "opkiln" / "ops.py", root / "python" / "opkiln" / "ops.py")
    (root / "tests" / "ops").mkdir(parents=True)
    return root


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    return _checkout(tmp_path / "tree")


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_writes_the_documented_files(checkout: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = _snapshot(checkout)
    assert main(["new-op", "demo_op", "--root", str(checkout)]) == 0
    after = _snapshot(checkout)
    added = sorted(set(after) - set(before))
    changed = sorted(k for k in before if before[k] != after[k])
    assert added == sorted(p.format(op="demo_op") for p in GENERATED)
    assert changed == ["python/opkiln/ops.py"], "no registry line: only the wrapper module changes"
    printed = capsys.readouterr().out
    assert all(p.format(op="demo_op") in printed for p in GENERATED)

    binding = (checkout / "ops" / "demo_op" / "binding.cpp").read_text()
    assert '#include "facade/facade.h"' in binding and 'm.def("demo_op(Tensor x) -> Tensor")' in binding
    assert "demo_op" in existing_ops(checkout)
    ops_py = (checkout / "python" / "opkiln" / "ops.py").read_text()
    tree = ast.parse(ops_py)
    (all_node,) = [n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "__all__"]
    names = ast.literal_eval(all_node.value)
    assert "demo_op" in names and names == sorted(names)
    # The old module, untouched but for its __all__ line and one bullet of its op list, then the new op's section.
    old = before["python/opkiln/ops.py"].decode()
    all_line = re.compile(r"^__all__ = \[[^\]]*\]$", re.MULTILINE)  # one line or several
    bullet = "- ``demo_op(x)``: TODO(demo_op): what it computes; not differentiable.\n"
    expected = all_line.sub(lambda _: all_line.findall(ops_py)[0], old).rstrip("\n")
    last_bullet = expected.index("\n\n", expected.index("- ``roi_align(")) + 1
    assert ops_py.startswith(expected[:last_bullet] + bullet + expected[last_bullet:])
    for needle in ('def demo_op(x: Tensor) -> Tensor:', '@_register_fake("opkiln::demo_op")',
                   '_register_autograd("opkiln::demo_op"'):
        assert needle in ops_py
    section = ops_py[len(expected) + len(bullet):]
    assert 'torch.library.register_autograd("' not in section  # the per-op pattern: built on first use
    ast.parse((checkout / "tests" / "ops" / "test_demo_op.py").read_text())


def test_the_doc_describes_what_new_op_writes() -> None:
    doc = (REPO / "docs" / "adding-an-op.md").read_text()
    assert "kiln new-op" in doc
    for pattern in [*GENERATED, "python/opkiln/ops.py"]:
        assert pattern.format(op="NAME") in doc, pattern


@pytest.mark.parametrize(("name", "why"), [
    ("RoiAlign", "not a snake_case name"), ("1op", "not a snake_case name"), ("op-name", "not a snake_case name"),
    ("_private", "not a snake_case name"), ("a__b", "not a snake_case name"), ("trailing_", "not a snake_case name"),
    ("", "not a snake_case name"), ("rois\u00e9", "not a snake_case name"), ("x" * 65, "longer than 64"),
    ("lambda", "Python keyword"), ("match", "Python keyword"), ("alignas", "C++ keyword"), ("xor_eq", "C++ keyword"),
    ("facade", "reserved"), ("common", "reserved"), ("weighted_sum", "exists already"),
    ("roi_align", "exists already"), ("batched_nms", "ops.py already defines"), ("cast", "ops.py already defines"),
])
def test_bad_names_exit_2_and_write_nothing(checkout: Path, name: str, why: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    before = _snapshot(checkout)
    assert main(["new-op", name, "--root", str(checkout)]) == 2
    err = capsys.readouterr().err
    assert why in err and err.count("\n") == 1 and "nothing written" in err
    assert _snapshot(checkout) == before


def test_a_taken_test_file_is_refused(checkout: Path) -> None:
    (checkout / "tests" / "ops" / "test_fresh.py").write_text("# someone's\n")
    with pytest.raises(NewOpError, match=r"tests/ops/test_fresh\.py exists already"):
        plan("fresh", checkout)


def test_not_a_checkout_is_refused(tmp_path: Path) -> None:
    assert main(["new-op", "fresh", "--root", str(tmp_path)]) == 2
    assert list(tmp_path.iterdir()) == []


def test_all_or_nothing_when_a_write_fails(checkout: Path) -> None:
    p = plan("late", checkout)
    before = _snapshot(checkout)
    # The test file appears between planning and writing: the write fails, and undoes itself.
    (checkout / "tests" / "ops" / "test_late.py").write_text("# raced\n")
    with pytest.raises(FileExistsError):
        write(p)
    assert _snapshot(checkout) == {**before, "tests/ops/test_late.py": b"# raced\n"}
    assert not (checkout / "ops" / "late").exists()


@pytest.fixture(scope="module")
def names_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _checkout(tmp_path_factory.mktemp("new-op-names") / "tree")


@settings(max_examples=300, deadline=None)
@given(name=st.one_of(st.text(max_size=12), st.from_regex(r"[a-z_][a-z0-9_]{0,10}", fullmatch=True)))
def test_any_accepted_name_is_a_safe_identifier(names_tree: Path, name: str) -> None:
    before = _snapshot(names_tree)
    try:
        p = plan(name, names_tree)
    except NewOpError:
        assert _snapshot(names_tree) == before  # planning never writes
        return
    assert name.isascii() and name.isidentifier() and name == name.lower()
    assert not name.startswith("_") and not name.endswith("_") and "__" not in name
    assert not keyword.iskeyword(name) and not keyword.issoftkeyword(name) and name not in CXX_KEYWORDS
    assert name not in existing_ops(names_tree)
    assert _snapshot(names_tree) == before
    assert all("{op}" not in text and "$" not in text for text in p.new_files.values()), "template left over"


ROI_POOL = ("roi_pool(Tensor input, Tensor rois, float spatial_scale, int pooled_height, int pooled_width) "
            "-> (Tensor, Tensor)")


def test_a_schema_with_a_backward_scaffolds_every_piece(checkout: Path) -> None:
    assert main(["new-op", "pool_demo", "--root", str(checkout), "--backward",
                 "--schema", ROI_POOL.replace("roi_pool", "pool_demo")]) == 0
    binding = (checkout / "ops" / "pool_demo" / "binding.cpp").read_text()
    for needle in ["std::tuple<Tensor, Tensor> pool_demo_cpu(const Tensor& input, const Tensor& rois, double "
                   "spatial_scale,", 'm.impl("_pool_demo_backward", OPKILN_KERNEL(pool_demo_backward_cpu));',
                   'm.impl("_pool_demo_backward", OPKILN_KERNEL(pool_demo_backward_cuda));',
                   'check_same_dtype(input, rois, op, "input", "rois");']:
        assert needle in binding, needle
    schemas = "".join(re.findall(r'"([^"]*)"', binding[binding.index("OPKILN_SCHEMAS"):]))
    assert schemas.startswith(ROI_POOL.replace("roi_pool", "pool_demo") + "_pool_demo_backward(Tensor grad_out0, "
                              "Tensor grad_out1, Tensor input, Tensor rois, float spatial_scale, int pooled_height, "
                              "int pooled_width, Tensor out0, Tensor out1) -> Tensor")
    ops_py = (checkout / "python" / "opkiln" / "ops.py").read_text()
    for needle in ["def pool_demo(input: Tensor, rois: Tensor, spatial_scale: float, pooled_height: int,",
                   '@_register_fake("opkiln::_pool_demo_backward")',
                   '_register_autograd("opkiln::pool_demo", _pool_demo_backward, '
                   "setup_context=_pool_demo_setup)",
                   '_register_autograd("opkiln::_pool_demo_backward", _pool_demo_double_backward,',
                   "- ``pool_demo(input, rois, spatial_scale, pooled_height, pooled_width)``: TODO(pool_demo)"]:
        assert needle in ops_py, needle
    test = (checkout / "tests" / "ops" / "test_pool_demo.py").read_text()
    assert "from support.ops_reference import DEVICES, FLOAT_DTYPES, TOL, acc_dtype" in test
    assert "def test_double_backward_raises" in test and "**TOL[dtype]" in test
    for path in [*(checkout / "ops" / "pool_demo").iterdir(), checkout / "tests" / "ops" / "test_pool_demo.py"]:
        long = [n for n, line in enumerate(path.read_text().splitlines(), 1) if len(line) > 120
                and not line.lstrip().startswith(("//", "#"))]
        assert long == [], f"{path.name}: lines {long} longer than 120"


@pytest.mark.parametrize(("schema", "why"), [
    ("", "empty"), ("demo(Tensor x)", "ends where '->' was expected"),
    ("demo(Tensor x) -> int", "must return Tensor"), ("demo(int size) -> Tensor", "first argument must be a Tensor"),
    ("demo() -> Tensor", "first argument must be a Tensor"), ("demo(Tensor x, ) -> Tensor", "argument type"),
    ("demo(Tensor x, int n=1) -> Tensor", "defaults are not supported"),
    ("demo(Tensor? x) -> Tensor", "optionals (Tensor?) are not supported"),
    ("demo(Tensor[] x) -> Tensor", "lists (Tensor[], int[])"),
    ("demo(Tensor(a!) x) -> Tensor", "aliasing annotations"), ("demo(Tensor x, *, int size) -> Tensor", "keyword-only"),
    ("demo(Tensor x, Tensor x) -> Tensor", "appears twice"), ("demo(Tensor template) -> Tensor", "C++ keyword"),
    ("demo(Tensor lambda) -> Tensor", "Python keyword"), ("demo(Tensor kind) -> Tensor", "reserved"),
    ("demo(Scalar x) -> Tensor", "is not one of Tensor, float, int, bool"),
    ("demo(Tensor X) -> Tensor", "not a snake_case name"), ("other(Tensor x) -> Tensor", "defines 'other'"),
    ("demo.out(Tensor x) -> Tensor", "overload names"), ("demo(Tensor x) -> (Tensor a, Tensor)", "every return"),
    ("demo(Tensor x) -> Tensor extra stuff", "after the returns"), ("demo(Tensor x) -> (Tensor", "ends where"),
    ("demo(Tensor x)\n-> Tensor", "one line"), ("démo(Tensor x) -> Tensor", "ASCII"),
])
def test_bad_schemas_exit_2_and_write_nothing(checkout: Path, schema: str, why: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    before = _snapshot(checkout)
    assert main(["new-op", "demo", "--root", str(checkout), "--schema", schema]) == 2
    err = capsys.readouterr().err
    assert why in err and err.count("\n") == 1 and "nothing written" in err, err
    assert _snapshot(checkout) == before


_IDENTS = st.from_regex(r"[a-z][a-z0-9]{0,5}(_[a-z0-9]{1,4})?", fullmatch=True)
_TYPES = st.sampled_from(["Tensor", "float", "int", "bool"])


@st.composite
def _schema_texts(draw: st.DrawFn) -> str:
    """Schemas near the accepted language: valid ones, and valid ones with one random edit."""
    args = draw(st.lists(st.tuples(_TYPES, _IDENTS), min_size=1, max_size=4))
    returns = draw(st.integers(1, 3))
    ret = "Tensor" if returns == 1 else "(" + ", ".join(["Tensor"] * returns) + ")"
    text = f"demo({', '.join(f'{a} {n}' for a, n in args)}) -> {ret}"
    edit = draw(st.sampled_from(["none", "delete", "insert", "replace"]))
    if edit != "none" and text:
        at = draw(st.integers(0, len(text) - 1))
        char = draw(st.sampled_from(list("()[],?*!=-> .:;'\"aZ0_\t")))
        text = {"delete": text[:at] + text[at + 1:], "insert": text[:at] + char + text[at:],
                "replace": text[:at] + char + text[at + 1:]}[edit]
    return text


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(_schema_texts(), st.text(max_size=40)))
def test_a_schema_is_accepted_only_if_torch_accepts_it_too(text: str) -> None:
    import torch

    from kiln_tool.op_schema import SchemaError, parse

    try:
        schema = parse(text, CXX_KEYWORDS)
    except SchemaError as exc:
        assert str(exc)  # refused, with a reason
        return
    parsed = torch._C.parse_schema(text)  # what torch makes of the very same text
    assert parsed.name == schema.name
    assert [(a.name, str(a.type)) for a in parsed.arguments] == [(a.name, a.type) for a in schema.args]
    assert [str(r.type) for r in parsed.returns] == ["Tensor"] * len(schema.returns)
    assert parsed.arguments[0].name == schema.tensors[0].name
    assert parse(schema.text) == schema


@settings(max_examples=60, deadline=None)
@given(text=_schema_texts())
def test_a_refused_schema_writes_nothing(names_tree: Path, text: str) -> None:
    before = _snapshot(names_tree)
    try:
        p = plan("demo", names_tree, text, backward=True)
    except NewOpError:
        assert _snapshot(names_tree) == before
        return
    assert all("$" not in body for body in p.new_files.values())
    for body in [p.ops_py_text, p.new_files[names_tree / "tests" / "ops" / "test_demo.py"]]:
        ast.parse(body)
    assert _snapshot(names_tree) == before


# What a skeleton's tests do before its kernel bodies are written (failing, passing), by kind; an op whose
# math is written (tests/new_op/examples) passes every test.
_ROI_VALUE_TESTS = {"test_matches_reference", "test_gradient_matches_reference", "test_gradcheck"}
SKELETON_OUTCOMES = {
    "backward": ({"test_matches_reference", "test_non_contiguous_inputs", "test_gradient_matches_reference",
                  "test_gradcheck"},
                 {"test_empty_inputs", "test_opcheck", "test_integer_input_raises", "test_double_backward_raises"}),
    "default": ({"test_matches_reference", "test_non_contiguous_inputs"},
                {"test_empty_inputs", "test_opcheck", "test_integer_input_raises",
                 "test_backward_raises_until_written"}),
    "roi": (_ROI_VALUE_TESTS, {"test_opcheck", "test_input_forms_module_and_fx", "test_empty_rois",
                               "test_non_contiguous_input",
                               "test_bad_batch_index_raises", "test_double_backward_raises"}),
    "rowwise": ({"test_matches_reference", "test_edge_shapes", "test_gradient_matches_reference", "test_gradcheck"},
                {"test_opcheck", "test_bad_input_raises", "test_double_backward_raises", "test_non_contiguous_input"}),
}
EXAMPLES = REPO / "tests" / "new_op" / "examples"
# A member of another box layout with a parameter of its own: rois [K, 6] (batch, cx, cy, w, h, angle) and
# `clockwise` (mmcv's roi_align_rotated), the family's sampling_ratio and aligned; only its math is written.
ROTATED = ["--kind", "roi", "--box-layout", "rotated", "--param", "clockwise:bool=False", "--schema",
           roi_schemas("roi_align_rotated", True, True, None, ["bool clockwise"])[0]]
# op -> (new-op arguments, its skeleton's kind in SKELETON_OUTCOMES, or None: its math is written from EXAMPLES)
SCAFFOLDED: dict[str, tuple[list[str], str | None]] = {
    "scaffold_pool": (["--backward", "--schema", ROI_POOL.replace("roi_pool", "scaffold_pool")], "backward"),
    "scaffold_plain": ([], "default"),
    "scaffold_roi": (["--kind", "roi"], "roi"),
    "scaffold_row": (["--kind", "rowwise", "--backward"], "rowwise"),
    "roi_avg_pool": (["--kind", "roi"], None),
    "row_center": (["--kind", "rowwise", "--backward"], None),
    "roi_align_rotated": (ROTATED, None),
}


def _write_the_math(tree: Path, op: str) -> None:
    """What a contributor writes after the scaffold: the op's header (its math) and the test's reference."""
    shutil.copy2(EXAMPLES / f"{op}.h", tree / "ops" / op / f"{op}.h")
    test = tree / "tests" / "ops" / f"test_{op}.py"
    text = test.read_text()
    source = (EXAMPLES / f"{op}_reference.py").read_text()
    (mine,) = [n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "reference"]
    start = text.index("def reference(")
    end = text.index("\n\n\n", start)
    test.write_text(text[:start] + (ast.get_source_segment(source, mine) or "") + text[end:])


@pytest.fixture(scope="module")
def scaffolded_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the tree with SCAFFOLDED's ops, the written ones' math in place."""
    from support.op_layout import violations

    tree = tmp_path_factory.mktemp("scaffolded") / "tree"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        if (REPO / rel).is_file() and not rel.startswith("tests/_artifacts"):
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, tree / rel)
    for op, (args, skeleton) in SCAFFOLDED.items():
        assert main(["new-op", op, "--root", str(tree), *args]) == 0
        if skeleton is None:
            _write_the_math(tree, op)
    # The scaffold adds no violation of the op-layout rule (the tree's own, if any, are test_sources.py's).
    assert sorted(map(str, violations(tree))) == sorted(map(str, violations(REPO)))
    assert disagreements(tree) == []
    return tree


def _nvcc() -> Path | None:
    """The CUDA 13.0 compiler: KILN_CUDA_HOME's, else the conventional toolkit folder's (the nvcc first on
    PATH here is a wrapper script: ../shared/notes/toolchain.md)."""
    for home in [os.environ.get("KILN_CUDA_HOME", ""), "/usr/local/cuda-13.0", "/usr/local/cuda"]:
        if home and (Path(home) / "bin" / "nvcc").is_file():
            return Path(home) / "bin" / "nvcc"
    return None


@pytest.mark.slow
def test_scaffolded_cuda_cores_compile(scaffolded_tree: Path, tmp_path: Path) -> None:
    """The families' CUDA drivers for every scaffolded family op, skeleton and written: the row-wise home's
    (common/row_reduce_cuda.cuh) is compiled by no build of the tree until an op of the tree is on it."""
    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("no CUDA toolkit (KILN_CUDA_HOME, /usr/local/cuda-13.0)")
    for op, (args, _) in SCAFFOLDED.items():
        if "--kind" not in args:
            continue
        cu = scaffolded_tree / "ops" / op / f"{op}_cuda.cu"
        done = subprocess.run([str(nvcc), "-std=c++20", "-arch=sm_90", "--expt-relaxed-constexpr", "-Werror",
                               "all-warnings", "-c", f"-I{scaffolded_tree / 'ops'}", "-o", str(tmp_path / f"{op}.o"),
                               str(cu)], capture_output=True, text=True, check=False)
        assert done.returncode == 0, f"{cu.name}: {done.stderr[-3000:]}"


@pytest.mark.slow
def test_scaffolded_ops_build_and_fail_only_on_their_kernel_bodies(scaffolded_tree: Path, tmp_path: Path) -> None:
    """Scaffold an op of each kind into a copy of the tree (roi_pool's shape with --backward, the default
    elementwise op, an roi and a rowwise op), and three ops whose math is then written (tests/new_op/examples:
    roi_avg_pool on the RoI family, roi_align_rotated on it with [K, 6] rois and a clockwise flag, row_center
    on the row-wise one); build the CPU wheel once (torch 2.13)
    and run the generated tests against it: a skeleton's value tests fail, everything else passes, and the
    written ops pass every test (values, gradients, gradcheck, opcheck)."""
    from kiln_tool.matrix_data import local_builds
    from kiln_tool.pipeline import build_wheel
    from support.venvs import make_venv

    tree = scaffolded_tree
    (spec,) = [s for s in local_builds() if s.cuda == "cpu"]
    wheel = build_wheel(Path(sys.executable), spec, tmp_path / "dist", tmp_path / "build.log", tmp_path / "build",
                        source=tree)
    python = make_venv(tmp_path / "venv", "2.13.0", extra=["pytest"])
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True)
    # The generated tests with the suite's helpers (tests/support), outside the tree: `opkiln` is
    # the installed wheel, and the tree's conftest (which needs the dev venv) stays out of it.
    run = tmp_path / "run"
    shutil.copytree(tree / "tests" / "support", run / "support")
    for op in SCAFFOLDED:
        shutil.copy2(tree / "tests" / "ops" / f"test_{op}.py", run)
    out = subprocess.run([str(python), "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider",
                          *(f"test_{op}.py" for op in SCAFFOLDED)], cwd=run, capture_output=True, text=True,
                         check=False)
    report = out.stdout[-6000:] + out.stderr[-2000:]
    for op, (_, skeleton) in SCAFFOLDED.items():
        outcomes: dict[str, set[str]] = {}
        for outcome, test in re.findall(rf"^(PASSED|FAILED|ERROR) test_{op}\.py::(\w+)", out.stdout, re.MULTILINE):
            outcomes.setdefault(test, set()).add(outcome)
        failing = {t for t, o in outcomes.items() if o != {"PASSED"}}
        if skeleton is None:
            assert outcomes and failing == set(), f"{op}: {report}"
            continue
        want_failing, want_passing = SKELETON_OUTCOMES[skeleton]
        assert failing == want_failing, f"{op}: {report}"
        assert {t for t, o in outcomes.items() if o == {"PASSED"}} == want_passing, f"{op}: {report}"
