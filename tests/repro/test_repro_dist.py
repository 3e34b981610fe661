"""kiln repro holds its two builds against dist/'s wheel of the same name, as the README says (issue 42, item 6)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from kiln_tool.matrix_data import BuildSpec
from kiln_tool.repro import Build, ReproResult, dist_wheel, source_hash_of


def _wheel(path: Path, source_hash: str | None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("pkg/__init__.py", "")
        if source_hash is not None:
            zf.writestr("pkg/_build_info.json", json.dumps({"source_hash": source_hash}))
    return path


def _result(dist_sha256: str | None) -> ReproResult:
    spec = BuildSpec.__new__(BuildSpec)
    builds = [Build(c, Path("w.whl"), Path("w.whl"), built_sha256="b", repaired_sha256="r") for c in "ab"]
    return ReproResult(spec, builds, dist_sha256=dist_sha256)


def test_two_equal_builds_that_differ_from_dists_wheel_are_not_reproducible() -> None:
    assert _result(None).identical
    assert _result("r").identical
    assert not _result("another").identical


def test_dists_wheel_is_found_where_kiln_wheels_puts_it(tmp_path: Path) -> None:
    name = "pkg-0.1.0+pt213cpu-cp311-cp311-manylinux_2_34_x86_64.whl"
    assert dist_wheel(tmp_path, name) is None
    kept = _wheel(tmp_path / "audit-failed" / name, "h")
    assert dist_wheel(tmp_path, name) == kept
    placed = _wheel(tmp_path / name, "h")
    assert dist_wheel(tmp_path, name) == placed


def test_the_source_hash_says_whether_dists_wheel_is_of_these_sources(tmp_path: Path) -> None:
    assert source_hash_of(_wheel(tmp_path / "a.whl", "abc")) == "abc"
    assert source_hash_of(_wheel(tmp_path / "b.whl", None)) is None
    (tmp_path / "c.whl").write_bytes(b"not a zip")
    assert source_hash_of(tmp_path / "c.whl") is None
