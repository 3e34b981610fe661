"""twinlibs (tests/adopters/projects/twinlibs): setup.py + torch.utils.cpp_extension, two libraries loaded with
torch.ops.load_library, no torch pin in its metadata, built by its own backend (`build = "backend"`).

From a fresh clone, the installed tool's `kiln wheels` builds it with setuptools against torch 2.13.0, then
labels it (+pt213cpu), pins torch (>=2.13,<2.14), adds the build info, repairs and audits it. What kiln's own
build would have hardened but a setup.py build decides for itself is judged by `kiln audit` as it is: each
check's verdict is held against what the libraries really are (pyelftools on the bytes, not the audit's
word): exported symbols, paths of the build machine, RUNPATH, text relocations, executable stack.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from adopters.adopting import (
    PROJECTS,
    Built,
    KilnTool,
    assert_repro_rebuilds,
    audit_json,
    build_info,
    failed_checks,
    head_commit,
    libraries_in,
    record_problems,
    run_python,
    timed,
    user_venv,
    wheel_metadata,
    zip_times,
)
from support.elf_facts import read_elf

pytestmark = pytest.mark.slow

PACKAGE = "twinlibs"
LIBRARIES = ["twinlibs/_axpy.cpython-311-x86_64-linux-gnu.so", "twinlibs/_prefix_sum.cpython-311-x86_64-linux-gnu.so"]
COMMIT_TIME = (2026, 11, 30, 12, 0, 0)


def test_the_project_itself_declares_no_torch_and_no_label() -> None:
    """As real op libraries ship: whatever pin and label the wheel gets, kiln gave it."""
    text = (PROJECTS / "twinlibs" / "pyproject.toml").read_text()
    assert 'version = "0.2.0"' in text and "dependencies" not in text and "torch>=" not in text
    assert "torch" not in (PROJECTS / "twinlibs" / "setup.py").read_text().split("setup(", 1)[1].split(
        "ext_modules", 1)[0]


def test_kiln_wheels_labels_pins_and_repairs_the_backends_wheel(twinlibs_cpu: Built, twinlibs_clone: Path) -> None:
    wheel = twinlibs_cpu.wheel("pt213cpu")
    assert wheel.name.startswith("twinlibs-0.2.0+pt213cpu-cp311-cp311-manylinux_"), wheel.name
    metadata = wheel_metadata(wheel)
    assert metadata["Name"] == ["twinlibs"] and metadata["Version"] == ["0.2.0+pt213cpu"], metadata
    (torch,) = [r for r in map(Requirement, metadata.get("Requires-Dist", [])) if r.name == "torch"]
    assert torch.specifier == SpecifierSet(">=2.13,<2.14"), metadata.get("Requires-Dist")
    assert record_problems(wheel) == []
    assert list(libraries_in(wheel, PACKAGE)) == LIBRARIES
    info = build_info(wheel, PACKAGE)
    assert {k: info[k] for k in ("project", "package", "namespace", "build", "libraries", "version", "ops")} == {
        "project": "twinlibs", "package": "twinlibs", "namespace": "twinlibs", "build": "backend",
        "libraries": "load-library", "version": "0.2.0+pt213cpu",
        "ops": ["twinlibs::axpy", "twinlibs::prefix_sum"]}
    assert info["git_commit"] == head_commit(twinlibs_clone)
    assert zip_times(wheel) == {COMMIT_TIME}, "every member dated at the commit (SOURCE_DATE_EPOCH)"


def _true_failures(library: bytes, clone: Path) -> set[str]:
    """The audit checks this library must fail, from its bytes: what a setup.py build leaves in it."""
    facts = read_elf(library)
    failing = set()
    if facts.exported:  # a library for torch.ops.load_library needs to export nothing
        failing.add("exports")
    # An absolute path of the build machine: the clone's, or a setup.py temp folder's (kiln maps the project's
    # tree to twinlibs/, so what stays is relative: twinlibs/build/temp...).
    strings = library.split(b"\0")
    if str(clone).encode() in library or any(s.startswith(b"/") and b"/build/temp." in s for s in strings):
        failing.add("build-paths")
    if facts.rpath or any(not entry.startswith("$ORIGIN") for entry in facts.runpath):
        failing.add("rpath")
    if facts.textrel:
        failing.add("textrel")
    if facts.exec_stack:
        failing.add("exec-stack")
    return failing


def test_kiln_audit_judges_each_library_truthfully(kiln_tool: KilnTool, twinlibs_cpu: Built,
                                                   twinlibs_clone: Path) -> None:
    """What the audit says, kiln wheels acted on: a wheel with an error waits in dist/audit-failed/ (exit 1),
    one without is placed in dist/ (Built.wheel holds that)."""
    wheel = twinlibs_cpu.wheel("pt213cpu")
    status, report = audit_json(kiln_tool, wheel)
    assert (wheel.parent.name == "audit-failed") == (status == 1), (wheel, status)
    failed = failed_checks(report)
    shown = json.dumps(sorted(failed))
    judged = {"exports", "build-paths", "rpath", "textrel", "exec-stack"}
    libraries = libraries_in(wheel, PACKAGE)
    expected = {(path, check) for path, data in libraries.items() for check in _true_failures(data, twinlibs_clone)}
    assert {(path, check) for path, check, _ in failed if check in judged} == expected, shown
    # What kiln's repair and the relabelling give every wheel holds here too: tags, RECORD, symbol versions,
    # the torch it is checked against, the ops registered.
    others = {(path, check) for path, check, _ in failed if check not in judged}
    assert others == set(), shown
    assert (status == 0) == (not any(severity == "error" for _, _, severity in failed)), (status, shown)
    (artifact,) = report["artifacts"]
    assert "2.13.0" in json.dumps(artifact["target"]), artifact["target"]


def test_kiln_repro_rebuilds_the_wheel_byte_for_byte(kiln_tool: KilnTool, twinlibs_cpu: Built,
                                                     twinlibs_clone: Path) -> None:
    assert_repro_rebuilds(kiln_tool, twinlibs_clone, twinlibs_cpu, "pt213cpu",
                          "twinlibs: kiln repro --once (cpu: one setup.py build elsewhere against dist/)")


def test_installed_beside_torch_213_both_libraries_load_and_their_ops_match_torch(twinlibs_cpu: Built,
                                                                                   tmp_path: Path) -> None:
    wheel = twinlibs_cpu.wheel("pt213cpu")
    with timed("twinlibs: a user's venv (torch 2.13.0 + the wheel)"):
        python = user_venv(tmp_path / "user", "2.13.0", [wheel])
    pip_check = subprocess.run([str(python), "-m", "pip", "check"], capture_output=True, text=True, check=False)
    assert pip_check.returncode == 0, f"the torch pin is not met by torch 2.13.0: {pip_check.stdout}"
    code = """
import torch, twinlibs
generator = torch.Generator().manual_seed(0)
x = torch.randn(5, 17, generator=generator)
y = torch.randn(5, 17, generator=generator)
torch.testing.assert_close(twinlibs.axpy(x, y, 0.25), 0.25 * x + y)
torch.testing.assert_close(torch.ops.twinlibs.prefix_sum(x), torch.cumsum(x, -1))
torch.testing.assert_close(twinlibs.prefix_sum(x.t()), torch.cumsum(x.t(), -1))
try:
    twinlibs.axpy(x, y[:, :3], 1.0)
except RuntimeError as exc:
    assert "twinlibs::axpy" in str(exc), exc
else:
    raise AssertionError("shapes that differ were accepted")
print("ok")
"""
    proc = run_python(python, code, tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout + proc.stderr
