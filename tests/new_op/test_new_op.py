"""`kiln new-op NAME`: the skeleton docs/adding-an-op.md starts from; refuses bad names, writes all or nothing."""

from __future__ import annotations

import ast
import keyword
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln_tool.cli import main
from kiln_tool.new_op import CXX_KEYWORDS, NewOpError, existing_ops, plan, write

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
    # The old module, untouched but for its __all__ line, then the new op's section.
    old = before["python/opkiln/ops.py"].decode()
    all_line = re.compile(r"^__all__ = .*$", re.MULTILINE)
    assert ops_py.startswith(all_line.sub(lambda _: all_line.findall(ops_py)[0], old).rstrip("\n"))
    for needle in ('def demo_op(x: Tensor) -> Tensor:', '@_register_fake("opkiln::demo_op")',
                   'torch.library.register_autograd("opkiln::demo_op"'):
        assert needle in ops_py
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
    assert all(f"{{{name}" not in text and "$" not in text for text in p.new_files.values()), "template left over"


@pytest.mark.slow
def test_skeleton_builds_and_its_test_fails_until_the_kernel_is_written(tmp_path: Path) -> None:
    from kiln_tool.matrix_data import local_builds
    from kiln_tool.pipeline import build_wheel
    from support.venvs import make_venv

    tree = tmp_path / "tree"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        if (REPO / rel).is_file() and not rel.startswith("tests/_artifacts"):
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, tree / rel)
    assert main(["new-op", "skeleton_op", "--root", str(tree)]) == 0
    (spec,) = [s for s in local_builds() if s.cuda == "cpu"]
    wheel = build_wheel(Path(sys.executable), spec, tmp_path / "dist", tmp_path / "build.log", tmp_path / "build",
                        source=tree)
    python = make_venv(tmp_path / "venv", "2.13.0", extra=["pytest"])
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True)
    # The generated test alone, outside the tree: `opkiln` is the installed wheel, and the tree's
    # conftest (which needs the dev venv) stays out of it.
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy2(tree / "tests" / "ops" / "test_skeleton_op.py", run)
    out = subprocess.run([str(python), "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "test_skeleton_op.py"],
                         cwd=run, capture_output=True, text=True, check=False)
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-2000:]
    assert "PASSED test_skeleton_op.py::test_integer_input_raises" in out.stdout, out.stdout[-3000:]
    assert re.search(r"FAILED test_skeleton_op.py::test_matches_reference\[shape1-", out.stdout), out.stdout[-3000:]
