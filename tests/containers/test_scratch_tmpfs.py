"""Containers get a tmpfs scratch folder only where the machine has the memory for it (data/containers.json
engine.scratch_tmpfs): cibuildwheel's cu130 test venv (4.6 GB) and the release rehearsal's user venvs are written
and deleted there. KILN_CONTAINER_TMPFS and the recipe are checked where they are read."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kiln_tool.containers import engine
from kiln_tool.containers.engine import ContainerError, load_recipe, scratch_tmpfs_args

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
    (arg,) = scratch_tmpfs_args(enough)
    name, _, value = arg.partition("=")
    path, _, options = value.partition(":")
    assert name == "--tmpfs" and path == RECIPE["path"] == "/tmp"
    opts = options.split(",")
    # exec: torch's libraries are mapped executable and the venv's scripts run from it; a size: never all memory.
    assert "exec" in opts and "noexec" not in opts and f"size={RECIPE['size_gib']}g" in opts
    assert RECIPE["size_gib"] < RECIPE["min_available_gib"]
    monkeypatch.setenv("KILN_CONTAINER_TMPFS", "1")
    assert scratch_tmpfs_args(enough) == [arg]


def test_less_memory_or_the_variable_keeps_the_overlay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KILN_CONTAINER_TMPFS", raising=False)
    github_runner = _meminfo(tmp_path, f"MemTotal: {_kib(16)} kB\nMemAvailable: {_kib(14.5)} kB\n")
    assert scratch_tmpfs_args(github_runner) == []
    assert scratch_tmpfs_args(tmp_path / "missing") == []
    plenty = _meminfo(tmp_path, f"MemAvailable: {_kib(256)} kB\n")
    monkeypatch.setenv("KILN_CONTAINER_TMPFS", "0")
    assert scratch_tmpfs_args(plenty) == []


@given(st.text(max_size=300))
def test_any_meminfo_text_gives_a_tmpfs_or_nothing_never_an_error(text: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "meminfo"
        path.write_text(text, errors="replace")
        env = os.environ.pop("KILN_CONTAINER_TMPFS", None)
        try:
            args = scratch_tmpfs_args(path)
        finally:
            if env is not None:
                os.environ["KILN_CONTAINER_TMPFS"] = env
    assert args == [] or (len(args) == 1 and args[0].startswith("--tmpfs=/tmp:"))


@given(st.text(max_size=40).filter(lambda v: v.strip() not in ("", "0", "1") and "\0" not in v))
def test_any_other_value_of_the_variable_is_refused_by_name(value: str) -> None:
    env = os.environ.get("KILN_CONTAINER_TMPFS")
    os.environ["KILN_CONTAINER_TMPFS"] = value
    try:
        with pytest.raises(ContainerError, match=r"KILN_CONTAINER_TMPFS=.*expected 0 .* or 1"):
            scratch_tmpfs_args()
    finally:
        if env is None:
            del os.environ["KILN_CONTAINER_TMPFS"]
        else:
            os.environ["KILN_CONTAINER_TMPFS"] = env


BAD_RECIPES = [
    {"path": "/tmp;rm -rf /", "size_gib": 10, "min_available_gib": 18},
    {"path": "tmp", "size_gib": 10, "min_available_gib": 18},
    {"path": "/tmp/../etc", "size_gib": 10, "min_available_gib": 18},
    {"path": "/tmp", "size_gib": "10g", "min_available_gib": 18},
    {"path": "/tmp", "size_gib": True, "min_available_gib": 18},
    {"path": "/tmp", "size_gib": 20, "min_available_gib": 18},
    {"path": "/tmp", "size_gib": 10},
    ["/tmp", 10, 18],
]


@pytest.mark.parametrize("recipe", BAD_RECIPES, ids=[json.dumps(r)[:40] for r in BAD_RECIPES])
def test_a_malformed_recipe_is_an_error_naming_the_file(recipe: object, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KILN_CONTAINER_TMPFS", raising=False)
    data = load_recipe()
    data["engine"] = {**data["engine"], "scratch_tmpfs": recipe}  # type: ignore[dict-item]
    monkeypatch.setattr(engine, "load_recipe", lambda: data)
    with pytest.raises(ContainerError, match=r"engine\.scratch_tmpfs must be"):
        scratch_tmpfs_args(_meminfo(tmp_path, f"MemAvailable: {_kib(256)} kB\n"))
