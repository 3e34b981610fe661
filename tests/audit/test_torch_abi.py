"""kiln torch-abi: a torch wheel's library exports recorded as data, and audits against the record."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
from audit_corpus import Corpus, fake_torch_wheel, make_wheel, run_kiln

from kiln_tool.audit import AuditInputError, AuditOptions, audit_paths
from kiln_tool.audit import target as target_module
from kiln_tool.audit.torch_abi import DATA_DIR_ENV, TorchAbiError, load_recorded, record_wheel


def test_record_of_a_torch_wheel(corpus: Corpus, tmp_path: Path) -> None:
    wheel = fake_torch_wheel(tmp_path, "9.1.0+cpu", {"libc10.so": corpus["libplain.so"].read_bytes(),
                                                      "libdep.so": corpus["sub/libdep.so"].read_bytes()})
    record = record_wheel(wheel)
    assert record["torch_version"] == "9.1.0+cpu"
    assert record["platform_tags"] == ["manylinux_2_28_x86_64"]
    assert set(record["libraries"]) == {"torch/lib/libc10.so", "torch/lib/libdep.so"}
    assert record["libraries"]["torch/lib/libdep.so"]["count"] == 1  # kiln_dep
    bogus = tmp_path / "bogus.whl"
    with zipfile.ZipFile(bogus, "w") as zf:
        zf.writestr("x.py", "")
    with pytest.raises(TorchAbiError, match="not a torch wheel"):
        record_wheel(bogus)


def test_audit_against_a_recorded_torch(corpus: Corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    records = tmp_path / "records"
    good = fake_torch_wheel(tmp_path / "good", "9.1.0+cpu", {"libc10.so": corpus["libplain.so"].read_bytes(),
                                                             "libdep.so": corpus["sub/libdep.so"].read_bytes()})
    # 9.2.0's libdep.so lacks kiln_dep: an ABI break the audit must see in the record alone.
    broken = fake_torch_wheel(tmp_path / "broken", "9.2.0+cpu", {"libc10.so": corpus["libplain.so"].read_bytes(),
                                                                 "libdep.so": corpus["libplain.so"].read_bytes()})
    for wheel in (good, broken):
        made = run_kiln("torch-abi", str(wheel), "--out", str(records))
        assert made.returncode == 0, made.stderr
    assert json.loads((records / "9.1.0+cpu.json").read_text())["format"] == 1
    monkeypatch.setenv(DATA_DIR_ENV, str(records))
    monkeypatch.setattr(target_module, "candidate_lib_dirs", lambda: [])
    record = load_recorded("9.1.0+cpu")
    assert record is not None and record.libraries["torch/lib/libdep.so"].exports("kiln_dep", None)

    # libneedsdep.so needs libdep.so (loaded by `import torch` in this fake torch) and calls kiln_dep.
    wheel = make_wheel(tmp_path, {"kilntest/libneedsdep.so": corpus["libneedsdep.so"].read_bytes()},
                       requires=("torch>=9.1",))
    newest = audit_paths([wheel], AuditOptions()).artifacts[0]
    assert "9.2.0+cpu as recorded in" in str(newest.target["torch"])  # the newest record the pin allows
    (lib,) = newest.libraries
    failed = [c for c in lib.checks if c.id == "undefined-symbols" and not c.ok]
    assert failed and "kiln_dep" in failed[0].detail
    against_good = audit_paths([wheel], AuditOptions(torch_version="9.1.0+cpu")).artifacts[0]
    assert all(c.ok for c in against_good.libraries[0].checks if c.id == "undefined-symbols")
    with pytest.raises(AuditInputError, match=r"is neither installed here \(none\) nor recorded"):
        audit_paths([wheel], AuditOptions(torch_version="9.3.0+cpu"))
