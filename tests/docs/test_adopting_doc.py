"""README.md's "Adopting kiln in your op library", run: every command of its sh blocks, as written and in order,
in a fresh clone, as one shell session would run them (each command's environment and folder carry to the
next, so `source .../activate` and `cd` work as a reader expects).

The clone (`git clone` of this checkout: committed files only) builds the tool's wheel itself (`make
kiln-wheel`), installs it into a venv beside the clone and builds the example projects of
tests/adopters/projects/ in place, as an adopter builds theirs. A command that fails names its line
(README.md:LINE); the commands after it then skip. Then: what the section shows of the example projects
(their `[tool.kiln]` tables, the CMakeLists.txt) is what those projects hold, the wheels it says the commands
make were made, and the clone is left clean (what kiln writes into a project is ignored by its .gitignore).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from support.doc_commands import DocCommand, doc_commands

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
TITLE = "## Adopting kiln in your op library"
PROJECTS = REPO / "tests" / "adopters" / "projects"
COMMAND_TIMEOUT_S = 1800


def section() -> tuple[int, int, str]:
    """(first line, last line, text) of the section in README.md (1-based lines, the title's included)."""
    lines = README.read_text(encoding="utf-8").splitlines()
    start = lines.index(TITLE)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return start + 1, end, "\n".join(lines[start:end])


def section_commands() -> list[DocCommand]:
    first, last, _ = section()
    return [c for c in doc_commands(README) if first <= c.line <= last]


COMMANDS = section_commands()


def fenced(lang: str) -> list[str]:
    """The bodies of the section's ```<lang> blocks."""
    return re.findall(rf"^```{lang}\n(.*?)^```$", section()[2], re.S | re.M)


def test_the_section_has_the_commands_an_adopter_runs() -> None:
    texts = [c.text for c in COMMANDS]
    assert texts[0] == "make kiln-wheel", texts
    assert any(re.search(r"pip install dist/kiln/torch_kiln-\*\.whl$", t) for t in texts), texts
    for needed in ("kiln wheels", "kiln audit dist/*.whl", "kiln repro --once", "cd ../segops"):
        assert needed in texts, (needed, texts)


def test_its_tables_are_the_example_projects_own() -> None:
    """Each `[tool.kiln]` table the section shows is, key for key, one of the example projects' tables."""
    shown = [tomllib.loads(block)["tool"]["kiln"] for block in fenced("toml") if "[tool.kiln]" in block]
    own = {p.name: tomllib.loads((p / "pyproject.toml").read_text())["tool"]["kiln"]
           for p in sorted(PROJECTS.iterdir())}
    assert [t for t in shown if t not in own.values()] == [], own
    assert len(shown) == len(own), "the section shows each example project's table"


def test_its_cmakelists_is_the_example_projects_own() -> None:
    (cmake,) = fenced("cmake")
    assert cmake == (PROJECTS / "ringops" / "CMakeLists.txt").read_text()


# --- the commands, run -----------------------------------------------------------------------------------------

@dataclass
class Session:
    """One shell session spread over the commands: the environment and folder each leaves to the next."""

    clone: Path
    env: dict[str, str]
    cwd: Path
    failed: DocCommand | None = None
    ran: list[str] = field(default_factory=list)


def _start_env() -> dict[str, str]:
    # The section's defaults, not this session's: no KILN_*/OPKILN_* settings, no active venv.
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("OPKILN_", "PYTEST_", "KILN_")) and k not in ("VIRTUAL_ENV", "PYTHONPATH")}


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Session:
    root = tmp_path_factory.mktemp("adopting-doc")
    clone = root / "opkiln"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
    return Session(clone=clone, env=_start_env(), cwd=clone)


@pytest.mark.slow
@pytest.mark.parametrize("command", COMMANDS, ids=[c.where for c in COMMANDS])
def test_command(command: DocCommand, session: Session, tmp_path: Path) -> None:
    if session.failed is not None:
        pytest.skip(f"an earlier command failed: {session.failed.where}")
    session.failed = command
    env_file, cwd_file = tmp_path / "env", tmp_path / "cwd"
    script = (f"set -uo pipefail\n{command.text}\nstatus=$?\nenv -0 > '{env_file}'\npwd > '{cwd_file}'\n"
              "exit $status\n")
    proc = subprocess.run(["bash", "-c", script], cwd=session.cwd, env=session.env, capture_output=True,
                          text=True, timeout=COMMAND_TIMEOUT_S, check=False)
    output = (proc.stdout + proc.stderr)[-6000:]
    # A command the section says exits non-zero says so in its comment ("# exit 1: ..."), and must.
    raw = README.read_text(encoding="utf-8").splitlines()[command.line - 1]
    said = re.search(r"#\s*exit (\d+)\b", raw)
    expected = int(said.group(1)) if said else 0
    assert proc.returncode == expected, f"{command.where}: `{command.text}` exited {proc.returncode}:\n{output}"
    session.env = dict(entry.split("=", 1) for entry in env_file.read_text().split("\0") if "=" in entry)
    session.cwd = Path(cwd_file.read_text().strip())
    session.failed = None
    session.ran.append(command.where)


def _ran_everything(session: Session) -> None:
    if session.failed is not None or len(session.ran) != len(COMMANDS):
        failed = session.failed.where if session.failed else "not all ran"
        pytest.skip(f"the section's commands did not all run (failed: {failed})")


@pytest.mark.slow
def test_the_wheels_it_promises_were_made(session: Session) -> None:
    _ran_everything(session)
    projects = session.clone / "tests" / "adopters" / "projects"
    assert [w.name for w in (session.clone / "dist" / "kiln").glob("torch_kiln-*-py3-none-any.whl")]
    assert len(list((projects / "ringops" / "dist").glob("ringops-0.3.0+pt213cpu-cp311-cp311-manylinux_*.whl"))) == 1
    # The source fallback: kiln sdist's unlabelled sdist, published by kiln index --sdist on the source page alone.
    site = projects / "ringops" / "build" / "site"
    assert (site / "sdist" / "ringops-0.3.0.tar.gz").is_file()
    assert "ringops-0.3.0.tar.gz#sha256=" in (site / "source" / "index.html").read_text()
    # The setup.py projects, linked hardened by kiln (a version script for their kind, --exclude-libs,ALL), pass
    # the audit into dist/ with nothing in dist/audit-failed/.
    for wheel in ("twinlibs-0.2.0+pt213cpu", "segops-0.1.0+pt213cpu"):
        dist = projects / wheel.split("-", 1)[0] / "dist"
        assert len(list(dist.glob(f"{wheel}-cp311-cp311-manylinux_*.whl"))) == 1, wheel
        assert list(dist.glob("audit-failed/*")) == [], wheel


@pytest.mark.slow
def test_the_clone_is_left_clean(session: Session) -> None:
    """The tool's venv lies outside the clone; what kiln writes into a project its .gitignore covers."""
    _ran_everything(session)
    status = subprocess.run(["git", "-C", str(session.clone), "status", "--porcelain", "--untracked-files=all"],
                            capture_output=True, text=True, check=True).stdout
    assert status == "", status
