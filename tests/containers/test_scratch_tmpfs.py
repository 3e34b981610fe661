"""cibuildwheel's containers get a tmpfs scratch folder only where the machine has the memory for it
(data/containers.json engine.scratch_tmpfs): the cu130 test venv (4.6 GB) is written and deleted there."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kiln_tool.containers.engine import load_recipe, scratch_tmpfs_arg

RECIPE = load_recipe()["engine"]["scratch_tmpfs"]  # type: ignore[index]


def _meminfo(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "meminfo"
    path.write_text(text)
    return path


def _kib(gib: float) -> int:
    return int(gib * (1 << 20))


def test_a_machine_with_the_memory_gets_an_executable_tmpfs_of_bounded_size(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KILN_CONTAINER_TMPFS", raising=False)
    enough = _meminfo(tmp_path, f"MemTotal: {_kib(64)} kB\nMemAvailable: {_kib(RECIPE['min_available_gib'])} kB\n")
    (arg,) = shlex.split(scratch_tmpfs_arg(enough))
    name, _, value = arg.partition("=")
    path, _, options = value.partition(":")
    assert name == "--tmpfs" and path == RECIPE["path"] == "/tmp"
    opts = options.split(",")
    # exec: torch's libraries are mapped executable and the venv's scripts run from it; a size: never all memory.
    assert "exec" in opts and "noexec" not in opts and f"size={RECIPE['size_gib']}g" in opts
    assert RECIPE["size_gib"] < RECIPE["min_available_gib"]


def test_less_memory_or_the_variable_keeps_the_overlay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KILN_CONTAINER_TMPFS", raising=False)
    github_runner = _meminfo(tmp_path, f"MemTotal: {_kib(16)} kB\nMemAvailable: {_kib(14.5)} kB\n")
    assert scratch_tmpfs_arg(github_runner) == ""
    assert scratch_tmpfs_arg(tmp_path / "missing") == ""
    plenty = _meminfo(tmp_path, f"MemAvailable: {_kib(256)} kB\n")
    monkeypatch.setenv("KILN_CONTAINER_TMPFS", "0")
    assert scratch_tmpfs_arg(plenty) == ""


@given(st.text(max_size=300))
def test_any_meminfo_text_gives_a_tmpfs_or_nothing_never_an_error(text: str) -> None:
    import os
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "meminfo"
        path.write_text(text, errors="replace")
        env = os.environ.pop("KILN_CONTAINER_TMPFS", None)
        try:
            arg = scratch_tmpfs_arg(path)
        finally:
            if env is not None:
                os.environ["KILN_CONTAINER_TMPFS"] = env
    assert arg == "" or arg.startswith(" --tmpfs=/tmp:")
