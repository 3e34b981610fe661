"""The policy loader and the search for the target torch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kiln_tool.audit import AuditInputError
from kiln_tool.audit import policy as policy_module
from kiln_tool.audit.policy import available_policies, load_policy, manylinux_policy_of_tag
from kiln_tool.audit.target import find_torch, torch_requirement


def test_shipped_policies_load() -> None:
    names = available_policies()
    assert "manylinux_2_28" in names and "common" not in names
    for name in names:
        loaded = load_policy(name)
        assert loaded.glibc == tuple(int(p) for p in name.split("_")[1:])
        ceiling = loaded.ceilings("x86_64")["GLIBC"].max
        # glibc 2.37 added no symbol version, so manylinux_2_37's newest is GLIBC_2.36
        assert ceiling is not None and (loaded.glibc[0], loaded.glibc[1] - 1) <= ceiling[:2] <= loaded.glibc
        assert "libc.so.6" in loaded.system_libraries and loaded.limits.max_compression_ratio > 1


def test_policy_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(AuditInputError, match="not a policy name"):
        load_policy("../etc/passwd")
    monkeypatch.setattr(policy_module, "POLICY_DIR", tmp_path)
    monkeypatch.setattr(policy_module, "_CACHE", {})
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(AuditInputError, match="not a readable JSON policy"):
        load_policy("broken")
    (tmp_path / "partial.json").write_text(json.dumps({"name": "partial", "glibc": [2, 28]}))
    with pytest.raises(AuditInputError, match="malformed"):
        load_policy("partial")
    (tmp_path / "renamed.json").write_text(json.dumps({"name": "other"}))
    with pytest.raises(AuditInputError, match="whose name is 'renamed'"):
        load_policy("renamed")


def test_platform_tags() -> None:
    assert manylinux_policy_of_tag("manylinux_2_28_x86_64") == ("manylinux_2_28", "x86_64")
    assert manylinux_policy_of_tag("manylinux2014_aarch64") == ("manylinux_2_17", "aarch64")
    assert manylinux_policy_of_tag("linux_x86_64") is None
    assert manylinux_policy_of_tag("musllinux_1_2_x86_64") is None


def test_torch_requirement() -> None:
    assert torch_requirement(["numpy", "torch (>=2.14.0)", "pillow"]) == ">=2.14.0"
    assert torch_requirement(["torch<2.14,>=2.13"]) == "<2.14,>=2.13"
    assert torch_requirement(["torch==2.13.0 ; python_version >= '3.10'"]) == "==2.13.0"
    assert torch_requirement(["torchvision==0.29.1", "torch-geometric"]) is None
    assert torch_requirement(["torch ; extra == 'gpu'"]) is None
    assert torch_requirement(["torch"]) == ""


def test_find_torch_by_exact_version_and_by_pin() -> None:
    missing, why = find_torch("9.9.9+cpu", None)
    assert missing is None and "torch 9.9.9+cpu (build info torch_version) is neither installed here" in why
    assert "nor recorded in data/torch_abi" in why
    unpinned, _ = find_torch(None, "")
    if unpinned is None:
        pytest.skip("no torch installed here")
    exact, _ = find_torch(unpinned.version, None)
    assert exact is not None and exact.version == unpinned.version
    pinned, _ = find_torch(None, f"=={unpinned.public_version}")
    assert pinned is not None and pinned.public_version == unpinned.public_version
    assert pinned.lib_dir is not None and (pinned.lib_dir / "libc10.so").is_file()
