"""`kiln new-op NAME --kind roi --box-layout LAYOUT --box-columns N --param NAME:TYPE=DEFAULT`: the RoI family's
box layout and the op's own parameters are inputs of the scaffold. Bad values exit 2 in one line and write
nothing; good ones reach the op's header (kBoxColumns, kBoxLayout, Params), its schemas, binding, wrapper,
module and test; the header's defaults compile (tests/new_op/test_new_op.py builds and runs a rotated
member with its math written)."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln_tool.cli import main
from kiln_tool.new_op import MODULE_ATTRIBUTES, NAMED_LAYOUTS, NewOpError, op_param, plan, roi_schemas

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


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _checkout(tmp_path_factory.mktemp("roi-options") / "tree")


BAD = [
    (["--box-layout", "polygon"], "neither a named layout"),
    (["--box-layout", "cx, cy, w, h"], "column 0 of a roi row is its batch index"),
    (["--box-layout", "batch, x, x"], "names column 'x' twice"),
    (["--box-layout", "batch, cx, class"], "'class' is a C++ or Python keyword"),
    (["--box-layout", "batch, cx, linux"], "compiler's macro"),
    (["--box-layout", "batch, cx, g"], "'g' is reserved"),
    (["--box-layout", "batch, std"], "'std' is reserved"),
    (["--param", "std:int=0"], "'std' is reserved"),
    (["--param", "training:bool=False"], "'training' is reserved"),
    (["--box-layout", "batch, Cx"], "not a snake_case name"),
    (["--box-layout", "batch, " + ", ".join(f"c{i}" for i in range(16))], "at most 16"),
    (["--box-layout", "rotated", "--box-columns", "5"], "--box-columns 5 disagrees with --box-layout 'rotated'"),
    (["--box-columns", "1"], "not a number of columns from 2 to 16"),
    (["--box-columns", "six"], "not a number of columns"),
    (["--box-columns", "99"], "not a number of columns"),
    (["--param", "clockwise"], "is not NAME:TYPE=DEFAULT"),
    (["--param", "clockwise:bool"], "needs a default"),
    (["--param", "clockwise:boolean=False"], "type 'boolean' is not bool, int or float"),
    (["--param", "clockwise:bool=false"], "a bool's default is True or False"),
    (["--param", "k:int=1.5"], "an int's default is a decimal integer"),
    (["--param", "k:int=9223372036854775808"], "in int64's range"),
    (["--param", "eps:float=inf"], "a float's default is a finite decimal number"),
    (["--param", "eps:float=1e999"], "a float's default is a finite decimal number"),
    (["--param", "aligned:bool=False"], "'aligned' is reserved"),
    (["--param", "max:int=1"], "'max' is reserved"),
    (["--param", "Clockwise:bool=False"], "not a snake_case name"),
    (["--param", "a:int=1", "--param", "a:int=2"], "--param 'a' is given twice"),
    (["--param", "demo:int=1"], "the op's own name"),
    ([*(a for i in range(9) for a in ("--param", f"p{i}:int=0"))], "at most 8"),
    (["--param", "clockwise:bool=False", "--schema", roi_schemas("demo")[0]], "each from a --param"),
]


@pytest.mark.parametrize(("args", "said"), BAD, ids=[" ".join(a)[:40] for a, _ in BAD])
def test_a_bad_layout_or_parameter_exits_2_in_one_line(tree: Path, capsys: pytest.CaptureFixture[str],
                                                        args: list[str], said: str) -> None:
    before = _snapshot(tree)
    assert main(["new-op", "demo", "--kind", "roi", "--root", str(tree), *args]) == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1 and err.endswith("; nothing written\n"), err
    assert _snapshot(tree) == before


def test_no_parameter_is_named_as_an_attribute_of_nn_module() -> None:
    """The op's module stores each parameter as self.NAME: module_attributes.txt lists every public
    attribute of this torch's nn.Module (kiln itself never imports torch)."""
    torch = pytest.importorskip("torch")
    public = {n for n in [*dir(torch.nn.Module), *vars(torch.nn.Module())] if not n.startswith("_")}
    assert public <= MODULE_ATTRIBUTES, sorted(public - MODULE_ATTRIBUTES)
    for name in sorted(n for n in public if re.fullmatch(r"[a-z][a-z0-9_]*", n)):
        with pytest.raises(NewOpError):
            op_param(f"{name}:int=0")


def test_other_kinds_refuse_the_roi_options(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for kind in ("elementwise", "rowwise", "ps-roi"):
        for args in (["--box-layout", "rotated"], ["--box-columns", "6"], ["--param", "clockwise:bool=False"]):
            assert main(["new-op", "demo", "--kind", kind, "--root", str(tree), *args]) == 2
            err = capsys.readouterr().err
            assert "are the roi kind's" in err and err.count("\n") == 1


def test_the_rotated_member_gets_its_layout_and_parameter_everywhere(tree: Path) -> None:
    schema = roi_schemas("demo", True, True, None, ["bool clockwise"])
    p = plan("demo", tree, schema[0], kind="roi", box_layout_text="rotated", params=["clockwise:bool=False"])
    header = p.new_files[tree / "ops" / "demo" / "demo.h"]
    assert "static constexpr std::int64_t kBoxColumns = 6;" in header
    assert 'static constexpr std::string_view kBoxLayout = "batch index, cx, cy, w, h, angle";' in header
    assert re.search(r"struct Params \{\s*bool clockwise = false;\s*\};", header)
    columns = r"roi\(Acc batch, Acc cx, Acc cy, Acc w, Acc h, Acc angle,\s+const RoiFamilyGeometryWith<Params>& g"
    assert re.search(columns, header)
    binding = p.new_files[tree / "ops" / "demo" / "binding.cpp"]
    assert binding.count("D, kNames, {clockwise});") == 2  # forward and backward pass the value
    assert "".join(re.findall(r'"([^"]*)"', binding.split("OPKILN_SCHEMAS(m)")[1].split("}")[0])) == "".join(schema)
    module = ast.parse(p.ops_py_text)
    functions = {n.name: n for n in module.body if isinstance(n, ast.FunctionDef)}
    wrapper = functions["demo"]
    assert [a.arg for a in wrapper.args.args][-3:] == ["sampling_ratio", "aligned", "clockwise"]
    assert ast.unparse(wrapper.args.defaults[-1]) == "False"
    assert "_rois(boxes, 6)" in ast.unparse(wrapper)
    (cls,) = [n for n in module.body if isinstance(n, ast.ClassDef) and n.name == "Demo"]
    assert "self.clockwise = clockwise" in ast.unparse(cls)
    fake = ast.unparse(functions["_demo_fake"])
    assert "'batch index, cx, cy, w, h, angle'" in fake and ", 6," in fake
    test = p.new_files[tree / "tests" / "ops" / "test_demo.py"]
    assert "EXTRA: tuple[Any, ...] = (2, True, True)" in test  # clockwise: not its default
    assert "torch.tensor([[0, 2, 2, 3, 2, 0.5]])" in test  # a [1, 6] install sample
    assert "torch.rand(rois, 5," in test and "xy + wh" not in test  # rows of the layout, not torchvision's boxes


def test_box_columns_alone_names_the_columns(tree: Path) -> None:
    p = plan("demo", tree, kind="roi", box_columns=" 3 ")
    header = p.new_files[tree / "ops" / "demo" / "demo.h"]
    assert "kBoxColumns = 3;" in header and "roi(Acc batch, Acc c1, Acc c2, const RoiFamilyGeometry& g" in header
    same = plan("demo", tree, kind="roi", box_columns="5")
    assert same.new_files == plan("demo", tree, kind="roi").new_files  # 5 columns: torchvision's


def test_the_header_of_every_parameter_type_compiles(tmp_path: Path) -> None:
    """A [K, 4] member with a bool, an int (int64's least) and a float parameter: its header and the
    family's CPU drivers compile warning-free (g++ -fsyntax-only instantiates them: about 4 s)."""
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    root = _checkout(tmp_path / "tree")
    own = ["flip:bool=True", "k:int=-9223372036854775808", "eps:float=1e-06"]
    assert main(["new-op", "demo", "--kind", "roi", "--root", str(root), "--box-layout", "batch, u, v, s",
                 *(a for p in own for a in ("--param", p))]) == 0
    header = (root / "ops" / "demo" / "demo.h").read_text()
    for field in ("bool flip = true;", "std::int64_t k = -9223372036854775807 - 1;", "double eps = 1e-06;"):
        assert field in header
    done = subprocess.run([cxx, "-std=c++20", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", f"-I{root / 'ops'}",
                           str(root / "ops" / "demo" / "demo_cpu.cpp")], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]


_IDENT = st.from_regex(r"[a-z][a-z0-9_]{0,5}", fullmatch=True)
_LAYOUTS = st.one_of(st.none(), st.sampled_from([*NAMED_LAYOUTS, " rotated ", "Rotated"]),
                     st.lists(_IDENT, min_size=0, max_size=7).map(lambda c: ", ".join(["batch", *c])),
                     st.lists(st.one_of(_IDENT, st.text(max_size=4)), max_size=5).map(",".join), st.text(max_size=12))
_COLUMNS = st.one_of(st.none(), st.integers(-2, 20).map(str), st.text(max_size=4))
_PARAM = st.one_of(
    st.builds("{}:{}={}".format, _IDENT, st.sampled_from(["bool", "int", "float", "str"]),
              st.one_of(st.sampled_from(["True", "False", "0", "-1", "0.5", "1e-3", "nan", ""]),
                        st.integers(-(2 ** 64), 2 ** 64).map(str), st.floats().map(repr))),
    st.text(max_size=14))


@settings(max_examples=150, deadline=None)
@given(layout=_LAYOUTS, columns=_COLUMNS, params=st.lists(_PARAM, max_size=3))
def test_any_layout_and_parameters_are_refused_in_one_line_or_reach_every_file(tree: Path, layout: str | None,
                                                                                columns: str | None,
                                                                                params: list[str]) -> None:
    before = _snapshot(tree)
    try:
        p = plan("demo", tree, kind="roi", box_layout_text=layout, box_columns=columns, params=params)
    except NewOpError as exc:
        assert str(exc) and "\n" not in str(exc)
        assert _snapshot(tree) == before
        return
    assert _snapshot(tree) == before
    named = NAMED_LAYOUTS.get(layout.strip()) if layout is not None else None
    count = (len(named.columns) if named else len(layout.split(",")) if layout is not None
             else int(columns) if columns is not None else 5)
    assert columns is None or int(columns) == count
    header = p.new_files[tree / "ops" / "demo" / "demo.h"]
    given_names = list(named.columns) if named else [c.strip() for c in layout.split(",")] if layout else []
    torchvision = count == 5 and (layout is None or given_names[1:] == ["x1", "y1", "x2", "y2"])
    assert (f"kBoxColumns = {count};" in header) != torchvision
    binding = p.new_files[tree / "ops" / "demo" / "binding.cpp"]
    names = [t.split(":")[0].strip() for t in params]
    forward = "".join(re.findall(r'"([^"]*)"', binding.split("OPKILN_SCHEMAS(m)")[1].split("}")[0])).split(") -> ")[0]
    assert forward.endswith("int pooled_width" + "".join(f", {t.split(':')[1].split('=')[0].strip()} {n}"
                                                          for t, n in zip(params, names, strict=True)))
    if params:
        assert "struct Params {" in header and f"kNames, {{{', '.join(names)}}});" in binding
    assert all("$" not in text for text in [*p.new_files.values(), p.ops_py_text]), "template left over"
    ast.parse(p.ops_py_text)
    ast.parse(p.new_files[tree / "tests" / "ops" / "test_demo.py"])
