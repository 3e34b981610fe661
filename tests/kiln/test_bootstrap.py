"""scripts/kiln under a Python that lacks kiln's dependencies: re-exec under the repo venv,
or one line on how to get them and exit 2; never a ModuleNotFoundError traceback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kiln_tool import bootstrap
from kiln_tool.bootstrap import KNOWN_THIRD_PARTY, command_modules, third_party_imports

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts"
# `python -S`: no site-packages, so none of kiln's third-party modules, on any machine.
BARE = [sys.executable, "-S"]


# ---------------------------------------------------------------------------- the source scan


def test_known_modules_are_what_the_source_imports() -> None:
    # The fast path trusts this list: a new third-party import must be added to it.
    assert third_party_imports(REPO / "src", command_modules([])) == set(KNOWN_THIRD_PARTY)


def test_matrix_needs_the_standard_library_only() -> None:
    # CI expands the build matrix with a bare setup-python (wheels.yml): no pip install.
    assert third_party_imports(REPO / "src", command_modules(["matrix"])) == set()
    # The Makefile makes the repo venv with `$(PYTHON) scripts/kiln venv`, before any venv exists.
    assert third_party_imports(REPO / "src", command_modules(["venv"])) == set()
    assert {"elftools", "packaging"} <= third_party_imports(REPO / "src", command_modules(["audit"]))


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_scan_follows_relative_and_lazy_imports_and_skips_type_checking(tmp_path: Path) -> None:
    _write(tmp_path, {
        "kiln_tool/__init__.py": "",
        "kiln_tool/commands/__init__.py": "import json\n",
        "kiln_tool/commands/tool.py": """
            from __future__ import annotations
            from typing import TYPE_CHECKING
            from ..helpers import helper
            if TYPE_CHECKING:
                import only_for_types
            else:
                import at_runtime
            def run():
                import lazy_dep.sub
                from kiln_tool.pkg import leaf
        """,
        "kiln_tool/helpers.py": "from .deep import x\n",
        "kiln_tool/deep.py": "from deep_dep import thing\n",
        "kiln_tool/pkg/__init__.py": "import package_dep\n",
        "kiln_tool/pkg/leaf.py": "import leaf_dep\n",
        "kiln_tool/unused.py": "import never_imported\n",
    })
    found = third_party_imports(tmp_path, ["kiln_tool.commands.tool"])
    assert found == {"at_runtime", "lazy_dep", "deep_dep", "package_dep", "leaf_dep"}


def test_an_import_guarded_by_its_import_error_is_optional(tmp_path: Path) -> None:
    _write(tmp_path, {
        "kiln_tool/__init__.py": "",
        "kiln_tool/commands/__init__.py": "",
        "kiln_tool/commands/tool.py": """
            def s3():
                try:
                    import boto3
                    from botocore.config import Config
                except (OSError, ImportError):
                    import fallback_dep
                    return None
            try:
                import needed_anyway
            except KeyError:
                pass
            try:
                import optional_dep
            except ModuleNotFoundError:
                optional_dep = None
            else:
                import after_optional
        """,
    })
    assert third_party_imports(tmp_path, ["kiln_tool.commands.tool"]) == {"fallback_dep", "needed_anyway",
                                                                          "after_optional"}


# ---------------------------------------------------------------------------- scripts/kiln, run


@pytest.fixture
def repo_copy(tmp_path: Path) -> Path:
    """A tree with scripts/ and src/ (kiln's data inside) of this checkout and no .venv."""
    root = tmp_path / "repo"
    shutil.copytree(SCRIPTS, root / "scripts", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "src", root / "src", ignore=shutil.ignore_patterns("__pycache__"))
    return root


def _kiln(python: list[str], root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != bootstrap.REEXEC_MARKER}
    return subprocess.run([*python, str(root / "scripts" / "kiln"), *args], capture_output=True, text=True,
                          cwd=root, env=env, timeout=120, check=False)


def _assert_one_line_how_to(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr and result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    for needle in ("make venv", "python -m pip install -r requirements/kiln.txt", *needles):
        assert needle in lines[0]


def _fake_venv_python(root: Path, command: list[str], log: Path) -> None:
    """root/.venv/bin/python: a script that notes its call, then runs `command ARGS`."""
    python = root / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec {" ".join(command)} "$@"\n')
    python.chmod(0o755)


def test_without_a_venv_it_says_how_to_get_the_dependencies(repo_copy: Path) -> None:
    result = _kiln(BARE, repo_copy, "audit", "--help")
    _assert_one_line_how_to(result, "elftools", "no repo venv at")
    _assert_one_line_how_to(_kiln(BARE, repo_copy), "rich")  # the full --help needs every command


def test_a_command_that_needs_only_the_standard_library_runs_anywhere(repo_copy: Path) -> None:
    result = _kiln(BARE, repo_copy, "matrix", "--counts")
    assert result.returncode == 0, result.stderr
    assert "stable" in result.stdout


def test_it_reexecutes_under_the_repo_venv(repo_copy: Path, tmp_path: Path) -> None:
    log = tmp_path / "venv-calls"
    _fake_venv_python(repo_copy, [sys.executable], log)  # this Python has kiln's dependencies
    result = _kiln(BARE, repo_copy, "audit", "--help")
    assert result.returncode == 0, result.stderr
    assert "usage: kiln audit" in result.stdout
    assert log.read_text().split() == [str(repo_copy / "scripts" / "kiln"), "audit", "--help"]


def test_a_venv_that_lacks_them_too_gets_the_message_not_a_loop(repo_copy: Path, tmp_path: Path) -> None:
    log = tmp_path / "venv-calls"
    _fake_venv_python(repo_copy, BARE, log)
    _assert_one_line_how_to(_kiln(BARE, repo_copy, "audit", "--help"), "the repo venv")
    assert len(log.read_text().splitlines()) == 1  # exec'd once


def test_a_real_venv_without_them_gets_the_message(repo_copy: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(repo_copy / ".venv")], check=True)
    result = _kiln([str(repo_copy / ".venv" / "bin" / "python")], repo_copy, "wheels", "--help")
    _assert_one_line_how_to(result, "the repo venv", "rich")


def test_this_checkout_runs_from_a_bare_python() -> None:
    if not (REPO / ".venv" / "bin" / "python").exists():
        pytest.skip("no .venv in this checkout (make venv)")
    result = _kiln(BARE, REPO, "audit", "--help")
    assert result.returncode == 0, result.stderr
    assert "usage: kiln audit" in result.stdout


def test_an_import_the_scan_cannot_see_still_gives_one_line(monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from kiln_tool import cli

    def main(argv: list[str]) -> int:
        raise ModuleNotFoundError("No module named 'computed_dep'", name="computed_dep")

    monkeypatch.setattr(cli, "main", main)
    assert bootstrap.run_kiln(SCRIPTS / "kiln", ["matrix"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "computed_dep" in err[0] and "make venv" in err[0]


def test_a_python_too_old_for_kiln_gets_one_line(repo_copy: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(bootstrap, "MIN_PYTHON", (sys.version_info[0] + 1, 0))
    with pytest.raises(SystemExit) as exit_info:
        bootstrap.run_kiln(repo_copy / "scripts" / "kiln", ["matrix"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and f"lacks Python >= {sys.version_info[0] + 1}.0 (it is" in err[0]
    assert "no repo venv at" in err[0] and "make venv" in err[0]
