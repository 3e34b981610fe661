"""The rule of tests/support/op_layout.py (an op is its folder) on small trees that break it."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.op_layout import op_names, tree_files, violations


def _tree(root: Path, files: dict[str, str]) -> Path:
    base = {
        ".gitignore": "/build/\n__pycache__/\n*.so\n",
        "ops/alpha/binding.cpp": ('OPKILN_SCHEMAS(m) { m.def("alpha(Tensor x) -> Tensor");\n'
                                  '  m.def("_alpha_grad(Tensor g) -> Tensor"); }\n'),
        "ops/alpha/alpha.h": '#include "common/common.h"\n',
        "ops/beta/binding.cpp": 'OPKILN_SCHEMAS(m) { m.def("beta(Tensor x) -> Tensor"); }\n',
        "ops/common/common.h": "// used by alpha and beta\nint shared();\n",
        "python/opkiln/ops.py": "def alpha(): ...\ndef beta(): ...\n",
        "README.md": "opkiln.alpha(x)\n",
        "tests/ops/test_alpha.py": "alpha\n",
        "build/x/alpha.txt": "alpha\n",
    }
    for rel, text in {**base, **files}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_a_clean_tree_passes(tmp_path: Path) -> None:
    root = _tree(tmp_path, {})
    assert op_names(root) == {"alpha": "alpha", "_alpha_grad": "alpha", "beta": "beta"}
    assert violations(root) == []
    assert "build/x/alpha.txt" not in {p.relative_to(root).as_posix() for p in tree_files(root)}


def test_including_another_ops_file_names_the_file_and_line(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"ops/beta/beta_cpu.cpp": '#include <vector>\n\n#include "alpha/alpha.h"\n'})
    (v,) = violations(root)
    assert (v.path, v.line) == ("ops/beta/beta_cpu.cpp", 3)
    assert str(v).startswith("ops/beta/beta_cpu.cpp:3: includes \"alpha/...\" of op alpha") and "ops/common/" in str(v)


def test_shared_code_may_mention_ops_in_comments_but_not_use_them(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"ops/common/roi.h": "/* alpha's\n beta's */\nint n = alpha(2);  // alpha\nint alpha_x;\n",
                            "ops/facade/x.h": '#include "beta/beta.h"\n'})
    assert sorted(map(str, violations(root))) == [
        "ops/common/roi.h:3: names op alpha in code: ops/common/ is shared by every op and names none (a comment may)",
        'ops/facade/x.h:1: includes "beta/..." of op beta: ops/facade/ is shared and depends on no op',
    ]


@pytest.mark.parametrize("rel", ["cmake/Ops.cmake", "src/kiln_tool/registry.py", "python/opkiln/_ops_list.py",
                                 "ops/CMakeLists.txt", "pyproject.toml"])
def test_a_second_list_of_ops_is_refused(tmp_path: Path, rel: str) -> None:
    root = _tree(tmp_path, {rel: "# the ops\nOPS = [\n  'beta',\n  '_alpha_grad',\n]\n"})
    found = [str(v) for v in violations(root)]
    assert [f.split(": ")[0] for f in found] == [f"{rel}:3", f"{rel}:4"]
    assert "names op beta outside ops/beta/" in found[0] and "_alpha_grad outside ops/alpha/" in found[1]


def test_a_file_git_does_not_know_is_checked(tmp_path: Path) -> None:
    # No git repository at all here: the walk, not `git grep`, finds the files.
    root = _tree(tmp_path, {"tools/new_thing.sh": "echo alpha\n"})
    assert not (root / ".git").exists()
    assert [str(v).split(": ")[0] for v in violations(root)] == ["tools/new_thing.sh:1"]


def test_ignored_files_are_left_out(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"build/cmake/ops.cmake": "alpha\n", "python/opkiln/_C.so": "alpha\n",
                            "x/__pycache__/a.py": "beta\n"})
    assert violations(root) == []
