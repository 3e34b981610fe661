"""kiln repro holds its two builds against dist/'s wheel of the same name, as the README says (issue 42, item 6)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from kiln_tool.matrix_data import BuildSpec
from kiln_tool.repro import SETTINGS_KEYS, Build, ReproResult, dist_wheel, settings_difference

SETTINGS = {"source_hash": "h", "git_commit": "c0ffee", "git_dirty": False, "abi_mode": "torch",
            "cuda_tag": "cu130", "cuda_archs": ["8.0", "9.0+PTX"], "flags": {"cuda": ["-O3"], "cxx": ["-O3"]}}


def _wheel(path: Path, source_hash: str | None, **settings: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("pkg/__init__.py", "")
        if source_hash is not None:
            info = {**SETTINGS, "source_hash": source_hash, "ops": ["pkg::op"], **settings}
            zf.writestr("pkg/_build_info.json", json.dumps(info))
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


def test_dists_wheel_is_a_reference_only_for_the_same_sources_and_settings(tmp_path: Path) -> None:
    rebuilt = _wheel(tmp_path / "rebuilt.whl", "h")
    assert settings_difference(_wheel(tmp_path / "same.whl", "h"), rebuilt) == ""
    # what a build produced (its op list) is compared by the repro itself, never a reason to skip it
    assert settings_difference(_wheel(tmp_path / "ops.whl", "h", ops=["pkg::other"]), rebuilt) == ""
    assert settings_difference(_wheel(tmp_path / "src.whl", "other"), rebuilt).startswith("source_hash ")
    # CI's failure: `kiln wheels` built the matrix's whole arch list, the repro test two archs and PTX
    whole = _wheel(tmp_path / "archs.whl", "h", cuda_archs=["7.5", "8.0", "12.0+PTX"])
    assert settings_difference(whole, rebuilt) == "cuda_archs (['7.5', '8.0', '12.0+PTX'] vs ['8.0', '9.0+PTX'])"
    assert settings_difference(_wheel(tmp_path / "none.whl", None), rebuilt).startswith("_build_info.json")
    (tmp_path / "c.whl").write_bytes(b"not a zip")
    assert settings_difference(tmp_path / "c.whl", rebuilt).startswith("_build_info.json")


@pytest.mark.parametrize("key", SETTINGS_KEYS)
def test_every_setting_decides_alone(tmp_path: Path, key: str) -> None:
    rebuilt = _wheel(tmp_path / "rebuilt.whl", "h")
    settings = {k: v for k, v in SETTINGS.items() if k != "source_hash"}
    other = _wheel(tmp_path / "other.whl", **{**settings, "source_hash": "h", key: "something else"})
    assert settings_difference(other, rebuilt).startswith(f"{key} (")


def _once(result: ReproResult, dist_sha256: str | None) -> ReproResult:
    result.builds = result.builds[1:]
    result.dist_sha256 = dist_sha256
    return result


def test_once_is_reproducible_only_when_its_one_build_is_dists_wheel() -> None:
    assert _once(_result(None), "r").identical
    assert not _once(_result(None), "other").identical  # dist/'s wheel differs
    assert not _once(_result(None), None).identical  # no reference: never "identical" by default


def test_once_without_a_wheel_in_dist_exits_2_before_any_build(tmp_path: Path) -> None:
    import subprocess
    import sys

    from adopters.adopting import clone_project

    root = clone_project("ringops", tmp_path)
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve().parents[2] / "scripts" / "kiln"),
                           "-C", str(root), "repro", "--once"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "holds no wheel" in proc.stderr and "kiln wheels" in proc.stderr, proc.stderr
    assert not (root / ".venvs").exists() and not (root / "build" / "logs" / "repro-torch2.13-cpu-py3.11.log").exists()
