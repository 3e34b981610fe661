"""Every command of docs/adding-an-op.md, run in order on a copy of the tree, as a reader would.

The copy holds the working tree (what .gitignore does not ignore, git-tracked or not), a
hard-link copy of the dev venv as its `.venv` (almost no disk; pip installs into it never write
the original's files) and the shared build venvs as `.venvs`. A failing command is named by its
doc line: `adding-an-op.md:LINE`. Then the doc's claim about the skeleton: its value tests, and
only those, fail until its math is written.

Cost (measured on the 2-core CI kind of machine): about 4 minutes, three builds (CPU, stable
CPU, one CUDA arch; ccache makes repeats cheaper) and a few pytest runs: marked slow.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from support.doc_commands import doc_commands
from support.op_layout import tree_files

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "adding-an-op.md"
EXAMPLE = "my_pool"
# The skeleton's value tests: what fails until its math is written.
# (my_pool is a member of the RoI family, scaffolded with --kind roi: new-op's roi_test.py.tmpl.)
VALUE_TESTS = {"test_matches_reference", "test_gradient_matches_reference", "test_gradcheck"}


def test_the_doc_has_commands_and_names_its_example() -> None:
    commands = doc_commands(DOC)
    assert len(commands) >= 8
    assert commands[0].text == "make dev-venv"
    assert commands[1].text.startswith(".venv/bin/python scripts/kiln new-op ") and EXAMPLE in commands[1].text
    assert all(c.where.startswith("adding-an-op.md:") for c in commands)


def _tree(where: Path) -> Path:
    needed = [REPO / ".venv" / "bin" / "python", REPO / ".venvs" / "torch2.13-cpu-py3.11",
              REPO / ".venvs" / "torch2.14-cu130-py3.11"]
    missing = [str(p.relative_to(REPO)) for p in needed if not p.exists()]
    if missing:
        pytest.skip(f"the doc's commands need {', '.join(missing)} (make wheels creates them)")
    tree = where / "tree"
    for path in tree_files(REPO):
        rel = path.relative_to(REPO)
        if rel.parts[0] in {".hypothesis", "gpu-check-out"} or rel.as_posix().startswith("tests/_artifacts"):
            continue
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, tree / rel)
    (tree / ".venvs").symlink_to((REPO / ".venvs").resolve())
    copied = subprocess.run(["cp", "-al", str(REPO / ".venv"), str(tree / ".venv")], capture_output=True, text=True,
                            check=False)
    if copied.returncode != 0:
        pytest.skip(f"cannot hard-link the dev venv into {where}: {copied.stderr.strip()}")
    return tree


@pytest.mark.slow
def test_every_command_of_the_doc_runs(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("KILN_ABI_MODE", "KILN_CUDA_ARCHS", "VIRTUAL_ENV")}
    for command in doc_commands(DOC):
        run = subprocess.run(["bash", "-c", command.text], cwd=tree, env=env, capture_output=True, text=True,
                             check=False, timeout=1200)
        if run.returncode != 0:
            pytest.fail(f"{command.where}: `{command.text}` exited {run.returncode}:\n"
                        f"{run.stdout[-3000:]}\n{run.stderr[-3000:]}", pytrace=False)
    # What the doc says of the skeleton: exactly the value tests fail.
    out = subprocess.run([".venv/bin/python", "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider",
                          f"tests/ops/test_{EXAMPLE}.py"], cwd=tree, env=env, capture_output=True, text=True,
                         check=False)
    outcomes: dict[str, set[str]] = {}
    for outcome, test in re.findall(rf"^(PASSED|FAILED|ERROR) tests/ops/test_{EXAMPLE}\.py::(\w+)", out.stdout,
                                    re.MULTILINE):
        outcomes.setdefault(test, set()).add(outcome)
    report = out.stdout[-4000:] + out.stderr[-2000:]
    assert {t for t, o in outcomes.items() if o != {"PASSED"}} == VALUE_TESTS, report
    assert {t for t, o in outcomes.items() if o == {"PASSED"}} == {
        "test_opcheck", "test_input_forms_module_and_fx", "test_non_contiguous_input", "test_empty_rois",
        "test_bad_batch_index_raises", "test_double_backward_raises"}, report
