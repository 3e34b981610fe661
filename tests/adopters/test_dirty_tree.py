"""A wheel built from an uncommitted tree says so, and `kiln release` refuses it (issue 42, item 7).

The build info names the commit a wheel was built from; a tree with uncommitted changes was recorded under
that commit with nothing marking it, so a release could publish bytes no commit holds. Now `git_dirty` is
true for a changed, added, deleted or new (untracked, not ignored) file, never for what kiln and the build
write into the project (build/, dist/, venvs, caches, egg-info); `kiln release` refuses such a wheel before it
reads anything else. Fast: small git repositories and small zips, no build (the CMake build's own build info
is checked in tests/cmake/test_cmake_api.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiln_tool.build_info import git_dirty
from kiln_tool.release import ReleaseError, run_release

WHO = {"GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@example.org", "GIT_COMMITTER_NAME": "a",
       "GIT_COMMITTER_EMAIL": "a@example.org"}


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, env={**os.environ, **WHO})


def _committed(root: Path) -> Path:
    (root / "csrc").mkdir(parents=True)
    (root / "csrc" / "op.cpp").write_text("int op() { return 1; }\n")
    (root / "pyproject.toml").write_text('[project]\nname = "p"\n')
    (root / ".gitignore").write_text("*.log\n")
    _git(root, "init", "--quiet", "--initial-branch=main")
    _git(root, "add", "--all")
    _git(root, "commit", "--quiet", "--no-gpg-sign", "-m", "first")
    return root


@pytest.fixture(autouse=True)
def _no_export_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KILN_GIT_COMMIT", raising=False)
    monkeypatch.delenv("KILN_GIT_DIRTY", raising=False)


def test_a_clean_tree_is_not_dirty_and_each_kind_of_change_is(tmp_path: Path) -> None:
    changes = {
        "edited": lambda r: (r / "csrc" / "op.cpp").write_text("int op() { return 2; }\n"),
        "deleted": lambda r: (r / "csrc" / "op.cpp").unlink(),
        "new kernel": lambda r: (r / "csrc" / "new.cu").write_text("// new\n"),
        "staged": lambda r: ((r / "csrc" / "b.cpp").write_text("\n"), _git(r, "add", "csrc/b.cpp")),
        "renamed": lambda r: _git(r, "mv", "csrc/op.cpp", "csrc/op2.cpp"),
    }
    clean = _committed(tmp_path / "clean")
    assert git_dirty(clean) is False
    for name, change in changes.items():
        root = _committed(tmp_path / name.replace(" ", "-"))
        change(root)
        assert git_dirty(root) is True, name


OUTPUTS = st.sampled_from(["build/cpu/x.o", "dist/p-1.0-py3-none-any.whl", ".venvs/torch/bin/python",
                           ".venv/lib/x.py", "wheelhouse/w.whl", "csrc/__pycache__/x.pyc", "p.egg-info/PKG-INFO",
                           ".pytest_cache/v/x", "run.log", "csrc/.hypothesis/x", "p/_build_info.json"])
NAMES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(outputs=st.lists(OUTPUTS, min_size=1, max_size=4, unique=True), source=st.none() | NAMES)
def test_what_kiln_writes_is_no_change_and_any_new_source_is(tmp_path_factory: pytest.TempPathFactory,
                                                              outputs: list[str], source: str | None) -> None:
    root = _committed(tmp_path_factory.mktemp("tree"))
    for rel in outputs:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("output\n")
    if source is not None:
        (root / "csrc" / f"{source}.cpp").write_text("// new source\n")
    assert git_dirty(root) is (source is not None)


def test_not_a_git_tree_is_unknown_and_an_export_speaks_through_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert git_dirty(tmp_path) is None
    monkeypatch.setenv("KILN_GIT_COMMIT", "0" * 40)
    assert git_dirty(tmp_path) is None
    monkeypatch.setenv("KILN_GIT_DIRTY", "1")
    assert git_dirty(tmp_path) is True
    monkeypatch.setenv("KILN_GIT_DIRTY", "0")
    assert git_dirty(tmp_path) is False


def _wheel(dist: Path, name: str, info: dict[str, object]) -> Path:
    dist.mkdir(parents=True, exist_ok=True)
    path = dist / f"{name}-0.1.0+pt213cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{name}/_build_info.json", json.dumps(info))
        zf.writestr(f"{name}/__init__.py", "")
    return path


@pytest.mark.parametrize("dirty", [True, False, None])
def test_kiln_release_refuses_a_wheel_of_a_dirty_tree_before_anything_else(tmp_path: Path, dirty: bool | None) -> None:
    storage = tmp_path / "storage.json"
    storage.write_text('{"backend": "site", "metadata": true}\n')
    dist, site = tmp_path / "dist", tmp_path / "site"
    commit = "ab" * 20
    _wheel(dist, "ringops", {"schema": 1, "package": "ringops", "git_commit": commit, "git_dirty": dirty})
    _wheel(dist, "other", {"schema": 1, "package": "other", "git_commit": "cd" * 20, "git_dirty": False})
    said: list[str] = []
    with pytest.raises(ReleaseError) as raised:
        run_release(dist, site, "https://wheels.example.org/", None, first_release=True, say=said.append,
                    storage_config=storage)
    if dirty:
        assert raised.value.step == "dirty" and raised.value.exit_code == 1
        message = str(raised.value)
        assert "ringops-0.1.0+pt213cpu-cp311-cp311-manylinux_2_28_x86_64.whl (commit abababababab plus " \
               "uncommitted changes)" in message and "other-" not in message, message
        assert "nothing was published" in message and message.count("\n") == 0
        assert said == [] and not (site.exists() and any(site.iterdir()))
    else:
        # Not refused for its tree: the release goes on and these bare zips fail a later step.
        assert raised.value.step != "dirty", raised.value


def test_a_rehearsal_lets_a_dirty_wheel_through_and_says_so(tmp_path: Path) -> None:
    """`kiln release-rehearsal` rehearses from a working tree and publishes nowhere: it passes allow_dirty."""
    storage = tmp_path / "storage.json"
    storage.write_text('{"backend": "site", "metadata": true}\n')
    wheel = _wheel(tmp_path / "dist", "ringops", {"schema": 1, "package": "ringops", "git_dirty": True})
    said: list[str] = []
    with pytest.raises(ReleaseError) as raised:
        run_release(tmp_path / "dist", tmp_path / "site", "https://wheels.example.org/", None, first_release=True,
                    say=said.append, storage_config=storage, allow_dirty=True)
    assert raised.value.step != "dirty", raised.value
    assert said[0] == ("release: 1 wheel(s) built from an uncommitted tree, let through for a rehearsal only: "
                       f"{wheel.name}")
