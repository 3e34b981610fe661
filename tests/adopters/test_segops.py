"""segops (tests/adopters/projects/segops): a setup.py project as many graph op libraries are, adopting kiln with
its table and the guard's two lines alone (issue 42, item 5).

It has no [project] table (name and version are setup()'s), registers its op with
torch::RegisterOperators().op(...) (no m.def anywhere), builds one python-module library, and writes no version
script. From a fresh clone, the installed tool's `kiln wheels` names it from setup.py, takes the op manifest from
what the built library registers once loaded in the build venv, links it hardened (a version script for its
kind, --exclude-libs,ALL) in a fresh setuptools build folder, and the wheel passes the audit into dist/.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from adopters.adopting import (
    PROJECTS,
    Built,
    KilnTool,
    audit_json,
    build_info,
    clone_project,
    failed_checks,
    kiln_wheels,
    libraries_in,
    run_python,
    table_lines,
    timed,
    user_venv,
    wheel_metadata,
)
from support.elf_facts import read_elf

pytestmark = pytest.mark.slow

PACKAGE = "segops"
LIBRARY = "segops/_segment.cpython-311-x86_64-linux-gnu.so"


def test_the_project_is_a_setup_py_library_without_project_table_or_m_def() -> None:
    """What makes it the case issue 42 names: kiln must not lean on [project], m.def or a version script."""
    root = PROJECTS / "segops"
    assert "[project]" not in (root / "pyproject.toml").read_text()
    assert table_lines(root) <= 2
    sources = (root / "csrc" / "segment.cpp").read_text()
    assert "RegisterOperators().op(" in sources and "m.def(" not in sources and "TORCH_LIBRARY" not in sources
    assert "version-script" not in (root / "setup.py").read_text() and not (root / "setup.cfg").exists()
    init = (root / "segops" / "__init__.py").read_text()
    assert "from ._kiln import guard" in init and "guard.load(__name__)" in init


def test_kiln_wheels_names_it_from_setup_py_and_the_wheel_passes_the_audit(kiln_tool: KilnTool,
                                                                           segops_cpu: Built) -> None:
    wheel = segops_cpu.wheel("pt213cpu")
    assert wheel.parent.name == "dist", segops_cpu.output  # passed the audit (audit-failed/ otherwise)
    assert wheel.name.startswith("segops-0.1.0+pt213cpu-cp311-cp311-manylinux_"), wheel.name
    assert wheel_metadata(wheel)["Name"] == ["segops"]
    status, report = audit_json(kiln_tool, wheel)
    assert status == 0 and failed_checks(report) == set(), report


def test_the_op_manifest_is_what_the_library_registers(segops_cpu: Built) -> None:
    """RegisterOperators leaves no m.def(...) to read: the manifest comes from loading the built library."""
    info = build_info(segops_cpu.wheel("pt213cpu"), PACKAGE)
    assert info["ops"] == ["segops::segment_sum"]
    assert info["targets"] == ["segops/_segment=python-module"]


def test_the_link_is_hardened_without_a_version_script_of_the_projects(segops_cpu: Built) -> None:
    """kiln's generated version script for a python-module library: its init function, nothing else."""
    libraries = libraries_in(segops_cpu.wheel("pt213cpu"), PACKAGE)
    assert list(libraries) == [LIBRARY]
    assert read_elf(libraries[LIBRARY]).exported == ("PyInit__segment",)


def test_installed_beside_torch_213_the_guard_loads_it_and_the_op_is_right(segops_cpu: Built,
                                                                          tmp_path: Path) -> None:
    with timed("segops: a user's venv (torch 2.13.0 + the wheel)"):
        python = user_venv(tmp_path / "user", "2.13.0", [segops_cpu.wheel("pt213cpu")])
    code = """
import torch, segops
src = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))
index = torch.tensor([0, 0, 2, 2, 2, 3])
torch.testing.assert_close(segops.segment_sum(src, index, 5), torch.zeros(5, 4).index_add_(0, index, src))
assert segops._kiln.guard.build_info()["ops"] == ["segops::segment_sum"]
print("ok")
"""
    proc = run_python(python, code, tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout + proc.stderr


def _clone_with_built_tree(segops_clone: Path, segops_cpu: Built, parent: Path) -> Path:
    """A second clone that carries the first one's build venv, build/ and egg-info (what a maintainer's tree
    holds after `kiln wheels`), so the next build starts where theirs would."""
    assert segops_cpu.proc.returncode == 0, segops_cpu.output
    root = clone_project("segops", parent)
    for name in (".venvs", "build"):
        subprocess.run(["cp", "-al", str(segops_clone / name), str(root / name)], check=True)
    return root


def test_a_changed_link_flag_reaches_the_link_and_keeps_kilns_logs(kiln_tool: KilnTool, segops_clone: Path,
                                                                   segops_cpu: Built, tmp_path: Path) -> None:
    """setuptools skips an extension whose build output is newer than its sources; a flag changed in setup.py
    then never reaches the link. Here the flag drops the GNU build-id note: the rebuilt library must lack it."""
    root = _clone_with_built_tree(segops_clone, segops_cpu, tmp_path)
    first = kiln_wheels(kiln_tool, root, timing="segops: kiln wheels (cpu, a second clone)")
    before = libraries_in(first.wheel("pt213cpu"), PACKAGE)[LIBRARY]
    assert ".note.gnu.build-id" in read_elf(before).sections
    setup = root / "setup.py"
    setup.write_text(setup.read_text().replace('["csrc/segment.cpp"])', '["csrc/segment.cpp"], '
                                               'extra_link_args=["-Wl,--build-id=none"])'))
    subprocess.run(["git", "-C", str(root), "commit", "--quiet", "--no-gpg-sign", "-am", "link without build-id"],
                   check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b", "GIT_COMMITTER_NAME": "a",
                        "GIT_COMMITTER_EMAIL": "a@b", "PATH": "/usr/bin:/bin"})
    shutil.rmtree(root / "dist")  # the rebuilt wheel has the same name: count it as new
    second = kiln_wheels(kiln_tool, root, timing="segops: kiln wheels (cpu, after a link flag changed)")
    after = libraries_in(second.wheel("pt213cpu"), PACKAGE)[LIBRARY]
    assert ".note.gnu.build-id" not in read_elf(after).sections, second.output
    assert (root / "build" / "logs" / "torch2.13-cpu-py3.11.log").is_file(), "kiln's log survives the rebuild"


def test_a_schema_source_that_cannot_be_read_fails_before_the_compile(kiln_tool: KilnTool, tmp_path: Path) -> None:
    root = clone_project("segops", tmp_path)
    (root / "pyproject.toml").write_text((root / "pyproject.toml").read_text()
                                         + 'schema-sources = ["csrc/registrations/*.cpp"]\n')
    with timed("segops: kiln wheels refused before the compile"):
        proc = kiln_tool.run("-C", root, "wheels")
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output
    assert "'csrc/registrations/*.cpp' matches no file" in " ".join(output.split()), output
    assert not (root / "build" / "torch2.13-cpu-py3.11").exists(), "nothing was compiled"
    assert not (root / ".venvs").exists(), "no build venv was made for it"
