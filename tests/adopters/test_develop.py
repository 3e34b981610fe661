"""The maintainer's loop (issue 42, item 1) for a setup.py project: `kiln develop` in the maintainer's own venv
(torch, setuptools and the torch-kiln wheel, as the README has them install it) gives an editable install that
imports through kiln's guard (before: `No module named 'segops._kiln'`), and after a one-line kernel edit the
next `kiln develop` rebuilds it (ninja, incremental) and the change is what imports. The seconds of each step go
to tests/_artifacts/adopters/timings.json."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from adopters.adopting import KilnTool, adopter_env, clone_project, run_python, timed

pytestmark = pytest.mark.slow

CHECK = """
import json, torch, segops
src = torch.ones(3, 2)
out = segops.segment_sum(src, torch.tensor([0, 1, 1]), 2)
print(json.dumps({"file": segops.__file__, "out": out.tolist(),
                  "ops": segops._kiln.guard.build_info()["ops"], "torch": torch.__version__,
                  "built_for": segops._kiln.guard.build_info()["torch_version"]}))
"""


def _develop(venv: Path, root: Path, timing: str) -> subprocess.CompletedProcess[str]:
    with timed(timing):
        proc = subprocess.run([str(venv / "bin" / "kiln"), "-C", str(root), "develop"], cwd=root,
                              env=adopter_env(venv / "bin"), capture_output=True, text=True, timeout=1800,
                              check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_an_editable_install_imports_through_the_guard_and_rebuilds_after_an_edit(kiln_tool: KilnTool,
                                                                                  tmp_path: Path) -> None:
    from support.venvs import make_venv

    with timed("segops develop: the maintainer's venv (torch 2.13.0, setuptools, the torch-kiln wheel)"):
        python = make_venv(tmp_path / "venv", "2.13.0", extra=["setuptools>=69", "ninja", str(kiln_tool.wheel)])
    root = clone_project("segops", tmp_path / "src")
    elsewhere = tmp_path / "elsewhere"  # not beside the clone: `python -c` puts its folder first on sys.path
    elsewhere.mkdir()
    _develop(python.parent.parent, root, "segops develop: kiln develop (first)")
    first = run_python(python, CHECK, elsewhere)
    assert first.returncode == 0, first.stdout + first.stderr
    seen = json.loads(first.stdout.strip().splitlines()[-1])
    assert seen["file"] == str(root / "segops" / "__init__.py"), "the source tree is what imports"
    assert seen["out"] == [[1.0, 1.0], [2.0, 2.0]] and seen["ops"] == ["segops::segment_sum"]
    assert seen["built_for"] == seen["torch"], "the build info is the installed torch's"
    status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=all"],
                            capture_output=True, text=True, check=True).stdout
    assert "_kiln" not in status and "_build_info.json" not in status, "kiln's files stay out of commits"

    kernel = root / "csrc" / "segment.cpp"
    kernel.write_text(kernel.read_text().replace("+= ps[r * row + c];", "+= 2 * ps[r * row + c];"))
    _develop(python.parent.parent, root, "segops develop: kiln develop after a one-line kernel edit")
    again = run_python(python, CHECK, elsewhere)
    assert again.returncode == 0, again.stdout + again.stderr
    assert json.loads(again.stdout.strip().splitlines()[-1])["out"] == [[2.0, 2.0], [4.0, 4.0]]


RING_CHECK = """
import json, torch, ringops
print(json.dumps({"file": ringops.__file__, "out": torch.ops.ringops.ring_shift(torch.ones(1, 3), 1).tolist(),
                  "ops": ringops._kiln.guard.build_info()["ops"]}))
"""


def test_a_kiln_build_installs_editable_and_rebuilds_on_import_after_an_edit(kiln_tool: KilnTool,
                                                                             tmp_path: Path) -> None:
    """kiln's build: scikit-build-core's rebuild on import, so the edit is what the next import runs."""
    from support.venvs import make_venv

    with timed("ringops develop: the maintainer's venv (torch 2.13.0, scikit-build-core, cmake, ninja, torch-kiln)"):
        python = make_venv(tmp_path / "venv", "2.13.0",
                           extra=["scikit-build-core>=1.1.2", "cmake>=3.26", "ninja", str(kiln_tool.wheel)])
    root = clone_project("ringops", tmp_path / "src")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    _develop(python.parent.parent, root, "ringops develop: kiln develop")
    first = run_python(python, RING_CHECK, elsewhere)
    assert first.returncode == 0, first.stdout + first.stderr
    seen = json.loads(first.stdout.strip().splitlines()[-1])
    assert seen["out"] == [[1.0, 1.0, 1.0]] and seen["ops"] == ["ringops::ring_shift"], seen
    kernel = root / "csrc" / "ringops.cpp"
    text = kernel.read_text()
    assert text.count("= src[r * s.n + c];") == 1
    kernel.write_text(text.replace("= src[r * s.n + c];", "= 2 * src[r * s.n + c];"))
    with timed("ringops develop: the import after a one-line kernel edit (rebuild on import)"):
        again = run_python(python, RING_CHECK, elsewhere)
    assert again.returncode == 0, again.stdout + again.stderr
    assert json.loads(again.stdout.strip().splitlines()[-1])["out"] == [[2.0, 2.0, 2.0]]
