"""docs/stable-abi.md, run: every command of its sh blocks, as written and in order, in a fresh clone.

The clone (`git clone` of this checkout: committed files only) builds everything itself: its own
.venv, build/, dist/ and tests/_artifacts/. Only the torches come from this checkout: each build
venv of .venvs/ is linked into the clone's .venvs/ (kiln keeps a venv whose record matches and
updates a stale one in place, as `make wheels` here would). A command that fails names its line
(stable-abi.md:LINE); the commands after it then skip. Commands that need a CUDA GPU run where
nvidia-smi lists one and skip, saying so, elsewhere. Then what the page says the commands made
(wheel files, folders, the audit's verdict on an unrepaired wheel) is checked in the clone.

The page's `pytest tests/stable` is this suite's own tests/stable: when the session runs those too,
the clone only collects them (`--collect-only`: the command's paths and tests are right) and what they
make (tests/_artifacts/...) is checked in this checkout, where the session's own run made it. This
module runs after tests/stable (marker after_suite("tests/stable")) for that; run alone, it runs the command whole.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from support.doc_commands import DocCommand, doc_commands

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "stable-abi.md"
COMMANDS = doc_commands(DOC)
GPU_COMMANDS = ("tests/stable/gpu_check.sh",)
COMMAND_TIMEOUT_S = 3600

# After tests/stable (what its tests make is checked here), not after the whole run.
pytestmark = [pytest.mark.slow, pytest.mark.after_suite("tests/stable")]
SUITE_PYTEST = re.compile(r"^\.venv/bin/python -m pytest (tests/[\w/.-]+)$")


def has_gpu() -> bool:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    listed = subprocess.run([smi, "-L"], capture_output=True, text=True, check=False)
    return listed.returncode == 0 and "GPU" in listed.stdout


@dataclass
class Clone:
    root: Path
    failed: DocCommand | None = None
    ran: list[str] = field(default_factory=list)
    suite_ran: list[str] = field(default_factory=list)  # test paths of the page the session itself ran


def _session_runs(session: pytest.Session, path: str) -> bool:
    target = (REPO / path).resolve()
    return any(target == Path(item.path).resolve() or target in Path(item.path).resolve().parents
               for item in session.items if item.get_closest_marker("after_suite") is None)


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Clone:
    root = tmp_path_factory.mktemp("stable-abi-doc") / "opkiln"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(root)], check=True)
    for python in sorted((REPO / ".venvs").glob("*/bin/python")):
        venv = python.parent.parent
        (root / ".venvs").mkdir(exist_ok=True)
        (root / ".venvs" / venv.name).symlink_to(venv.resolve(), target_is_directory=True)
    return Clone(root)


def _env() -> dict[str, str]:
    # The page's defaults, not this session's: no OPKILN_* settings, no active venv.
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("OPKILN_", "PYTEST_", "KILN_")) and k not in ("VIRTUAL_ENV", "PYTHONPATH")}


def test_the_page_has_commands() -> None:
    assert len(COMMANDS) >= 5, [c.where for c in COMMANDS]
    assert any(c.text.startswith(GPU_COMMANDS) for c in COMMANDS)


@pytest.mark.parametrize("command", COMMANDS, ids=[c.where for c in COMMANDS])
def test_command(command: DocCommand, clone: Clone, request: pytest.FixtureRequest) -> None:
    if clone.failed is not None:
        pytest.skip(f"an earlier command failed: {clone.failed.where}")
    if command.text.startswith(GPU_COMMANDS) and not has_gpu():
        pytest.skip(f"{command.where} needs a CUDA GPU and nvidia-smi lists none here: `{command.text}`")
    text = command.text
    suite = SUITE_PYTEST.match(text)
    if suite and _session_runs(request.session, suite.group(1)):
        text += " --collect-only -q"  # this session runs those tests itself
        clone.suite_ran.append(suite.group(1))
    clone.failed = command
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", text], cwd=clone.root, env=_env(),
                          capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False)
    output = (proc.stdout + proc.stderr)[-6000:]
    assert proc.returncode == 0, f"{command.where}: `{command.text}` exited {proc.returncode}:\n{output}"
    clone.failed = None
    clone.ran.append(command.where)


def _ran_everything(clone: Clone) -> None:
    if clone.failed is not None or not clone.ran:
        failed = clone.failed.where if clone.failed else "none ran"
        pytest.skip(f"the page's commands did not all run (failed: {failed})")


def test_the_files_and_folders_the_page_names_were_made(clone: Clone) -> None:
    _ran_everything(clone)
    text = DOC.read_text()
    named = sorted(set(re.findall(r"`((?:dist|build|tests/_artifacts)/[^`*<>\s]+)`", text)))
    assert any(n.startswith("dist/opkiln-") for n in named), named
    # What the suite's own tests make (tests/_artifacts/) exists here when the clone only collected them.
    made_by = {n: REPO if clone.suite_ran and n.startswith("tests/_artifacts/") else clone.root for n in named}
    missing = [n for n in named if not (made_by[n] / n).exists()]
    assert not missing, f"stable-abi.md names what its commands did not make: {missing}"


def test_the_audit_refuses_the_unrepaired_wheel_and_names_kiln_repair(clone: Clone) -> None:
    """Why the page's by-hand recipe repairs before it audits: the plain `pip wheel` output fails, and the
    fix the audit prints is kiln's repair (our excludes and floor), not plain auditwheel."""
    _ran_everything(clone)
    (unrepaired,) = sorted((clone.root / "build" / "stable-wheels").glob("opkiln-*-linux_x86_64.whl"))
    proc = subprocess.run([str(clone.root / "scripts" / "kiln"), "audit", str(unrepaired)], cwd=clone.root,
                          env=_env(), capture_output=True, text=True, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    fix = " ".join(proc.stdout.split())
    assert "symbol-versions" in fix and "`kiln repair WHEEL -w DIR`" in fix, fix
    assert "with auditwheel repair" not in fix
