"""kiln wheels names a failed build's first compiler error, not the last lines of the log (issue 42, item 6).

The logs are real: g++ and ninja run on a broken source, their output framed by the lines pip and setuptools
write around a failed build (`ninja: build stopped`, `error: subprocess-exited-with-error`).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln_tool.pipeline import first_error

NINJA = shutil.which("ninja") or str(Path(__file__).resolve().parents[2] / ".venv" / "bin" / "ninja")
BROKEN = "int first() { return undeclared_thing + 1; }\nint second() { return 2 }\n"
PIP_FOOTER = ["ninja: build stopped: subcommand failed.",
              "  error: subprocess-exited-with-error",
              "  ERROR: Failed building wheel for segops",
              "ERROR: Failed to build one or more wheels"]


@pytest.fixture(scope="module")
def ninja_failure(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """What ninja prints when g++ fails on BROKEN (two errors) in a two-file build."""
    if not Path(NINJA).exists() or shutil.which("g++") is None:
        pytest.skip("needs ninja and g++")
    root = tmp_path_factory.mktemp("ninja")
    (root / "bad.cpp").write_text(BROKEN)
    (root / "good.cpp").write_text("int fine() { return 1; }\n")
    (root / "build.ninja").write_text("rule cxx\n  command = g++ -c $in -o $out\n"
                                      "build good.o: cxx good.cpp\nbuild bad.o: cxx bad.cpp\n")
    proc = subprocess.run([NINJA, "-j1"], cwd=root, capture_output=True, text=True, check=False)
    assert proc.returncode != 0
    return (proc.stdout + proc.stderr).splitlines()


def _log(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_first_compiler_error_is_named_not_ninjas_last_line(ninja_failure: list[str], tmp_path: Path) -> None:
    log = _log(tmp_path / "build.log", ["$ python -m pip wheel ...", "  running build_ext", *ninja_failure,
                                        *PIP_FOOTER])
    shown = first_error(log)
    assert shown.splitlines()[0].endswith("error: ‘undeclared_thing’ was not declared in this scope"), shown
    assert "undeclared_thing + 1" in shown, "the source line the compiler quotes comes with it"
    assert "ninja: build stopped" not in shown and "Failed building wheel" not in shown


def test_an_earlier_build_in_the_same_log_is_not_blamed(ninja_failure: list[str], tmp_path: Path) -> None:
    older = ["$ python -m pip wheel ... (yesterday)", "old.cpp:3:1: error: an error that was fixed since"]
    log = _log(tmp_path / "build.log", [*older, "$ python -m pip wheel ...", *ninja_failure, *PIP_FOOTER])
    assert "fixed since" not in first_error(log)
    assert "undeclared_thing" in first_error(log)


def test_a_log_without_a_diagnostic_gives_nothing(tmp_path: Path) -> None:
    """The caller then shows the log's last lines, as before."""
    assert first_error(_log(tmp_path / "build.log", ["$ python -m pip wheel ...", "  running build_ext",
                                                     *PIP_FOOTER])) == ""
    assert first_error(tmp_path / "missing.log") == ""


_QUIET = st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyz0123456789 ./-_[]=+"), max_size=60).filter(
    lambda line: "error" not in line.lower() and not line.startswith("$ "))


@settings(max_examples=60, deadline=None)
@given(before=st.lists(_QUIET, max_size=20), between=st.lists(_QUIET, max_size=8),
       file=st.from_regex(r"[a-z_]{1,12}\.(cpp|cu|h)", fullmatch=True), row=st.integers(1, 99999))
def test_whatever_surrounds_it_the_first_diagnostic_is_the_one_shown(before: list[str], between: list[str],
                                                                     file: str, row: int, tmp_path_factory:
                                                                     pytest.TempPathFactory) -> None:
    first = f"csrc/{file}:{row}:7: error: no matching function for call to ‘g’"
    second = f"csrc/{file}:{row + 1}:1: fatal error: other.h: No such file or directory"
    log = _log(tmp_path_factory.mktemp("log") / "build.log",
               ["$ pip wheel", *before, first, *between, second, *PIP_FOOTER])
    assert first_error(log).splitlines()[0] == first
