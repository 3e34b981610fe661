"""Ops are found in one place, their folders: ops/<op>/binding.cpp; the build info's op manifest follows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kiln_tool.build_info import op_bindings, op_manifest

REPO = Path(__file__).resolve().parents[2]


def test_every_op_folder_is_found() -> None:
    found = [p.parent.name for p in op_bindings(REPO)]
    assert found == sorted(found)
    assert {"nms", "rms_norm", "roi_align", "weighted_sum"} <= set(found)
    assert "common" not in found and "facade" not in found


def test_manifest_lists_every_schema_of_the_ops_built() -> None:
    manifest = op_manifest(op_bindings(REPO, ["roi_align", "rms_norm"]), "opkiln")
    assert manifest == ["opkiln::_rms_norm_backward", "opkiln::_rms_norm_forward", "opkiln::_roi_align_backward",
                        "opkiln::rms_norm", "opkiln::roi_align"]


def test_an_op_without_its_binding_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no binding source"):
        op_bindings(REPO, ["weighted_sum", "not_an_op"])
    (tmp_path / "ops" / "empty_op").mkdir(parents=True)
    (tmp_path / "ops" / "empty_op" / "binding.cpp").write_text("// no schema yet\n")
    with pytest.raises(ValueError, match=r"no m\.def"):
        op_manifest(op_bindings(tmp_path), "opkiln")


def test_installed_wheel_manifest_matches_the_tree() -> None:
    opkiln = pytest.importorskip("opkiln")
    info = opkiln.build_info()
    assert info["ops"] == op_manifest(op_bindings(REPO), "opkiln"), json.dumps(info["ops"])
