"""Zip bombs, lying sizes, corrupt data and unsafe members: every kiln tool refuses them with exit 2 and
one line (no traceback), in bounded memory; `kiln repair` before auditwheel ever runs."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest

from index.synthetic_wheels import make_wheel
from trust.hostile_zips import SYMLINK, add_members, bomb, corrupt_deflate, member
from trust.kiln_runs import kiln, tree

MANYLINUX = "manylinux_2_28_x86_64"


def _wheel(case: str, directory: Path) -> Path:
    if case == "bomb":
        return bomb(directory, platform=MANYLINUX)
    if case == "lying size":
        return bomb(directory, lie=100, platform=MANYLINUX)
    if case == "corrupt deflate":
        return corrupt_deflate(make_wheel(directory, platform=MANYLINUX))
    wheel = make_wheel(directory, platform=MANYLINUX)
    extra = {
        "symlink member": [(member("opkiln/link.so", mode=SYMLINK), b"/etc/passwd")],
        "absolute member": [(member("/etc/evil.py"), b"x")],
        "dotdot member": [(member("opkiln/../../evil.py"), b"x")],
        "duplicate member": [(member("opkiln/__init__.py"), b"other")],
        "backslash member": [(member("opkiln\\..\\evil.py"), b"x")],
        "unknown compression": [(member("opkiln/x.bin", method=zipfile.ZIP_BZIP2), b"x" * 100)],
    }[case]
    return add_members(wheel, extra)


CASES = ["bomb", "lying size", "corrupt deflate", "symlink member", "absolute member", "dotdot member",
         "duplicate member", "backslash member", "unknown compression"]
REASONS = {"bomb": "zip bomb", "lying size": "past its declared", "corrupt deflate": "corrupt",
           "symlink member": "symbolic link", "absolute member": "outside site-packages",
           "dotdot member": "outside site-packages", "duplicate member": "appears twice",
           "backslash member": "outside site-packages", "unknown compression": "compression method"}


@pytest.mark.parametrize("case", CASES)
def test_kiln_index_refuses(case: str, tmp_path: Path) -> None:
    wheel = _wheel(case, tmp_path / "dist")
    run = kiln("index", wheel.parent, tmp_path / "site")
    assert run.code == 2, run.stdout + run.stderr
    assert REASONS[case] in run.stderr
    assert "Traceback" not in run.stderr
    assert not (tmp_path / "site").exists()


@pytest.mark.parametrize("case", CASES)
def test_kiln_audit_refuses(case: str, tmp_path: Path) -> None:
    wheel = _wheel(case, tmp_path / "dist")
    run = kiln("audit", wheel)
    assert run.code == 2, run.stdout + run.stderr
    assert REASONS[case] in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    json_run = kiln("audit", "--json", wheel)
    assert json_run.code == 2
    doc = json.loads(json_run.stdout)
    assert doc["ok"] is False and REASONS[case] in doc["error"]


@pytest.mark.parametrize("case", CASES)
def test_kiln_repair_refuses_before_auditwheel(case: str, tmp_path: Path) -> None:
    wheel = _wheel(case, tmp_path / "dist")
    before = tree(tmp_path / "dist")
    run = kiln("repair", wheel, "-w", tmp_path / "repaired")
    assert run.code == 2, run.stdout + run.stderr
    assert REASONS[case] in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert not (tmp_path / "repaired").exists()  # auditwheel never ran: it writes there first
    assert tree(tmp_path / "dist") == before


def test_kiln_repair_with_w_naming_a_file(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "dist", platform=MANYLINUX)
    target = tmp_path / "a-file"
    target.write_text("keep me")
    run = kiln("repair", wheel, "-w", target)
    assert run.code == 2, run.stderr
    assert run.stderr.strip() == f"kiln repair: -w {target}: exists and is not a directory"
    assert target.read_text() == "keep me"


@pytest.mark.parametrize("content", [b"", b"not a zip", b"PK\x03\x04" + b"\0" * 100])
def test_kiln_repair_of_something_that_is_not_a_wheel(content: bytes, tmp_path: Path) -> None:
    wheel = tmp_path / "opkiln-0.1.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    wheel.write_bytes(content)
    run = kiln("repair", wheel, "-w", tmp_path / "out")
    assert run.code == 2, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and "Traceback" not in run.stderr


def test_safezip_never_yields_more_than_declared(tmp_path: Path) -> None:
    from kiln_tool.safezip import SafeZip, UnsafeArchiveError

    wheel = bomb(tmp_path, zeros=8 << 20, lie=4096)
    seen = 0
    with SafeZip(wheel) as archive, pytest.raises(UnsafeArchiveError, match="past its declared"):
        for chunk in archive.stream("opkiln/zeros.bin"):
            seen += len(chunk)
    assert seen <= 4096


def test_any_unhandled_error_is_one_line_and_exit_2(monkeypatch: pytest.MonkeyPatch) -> None:
    import kiln_tool.commands.audit as audit_command

    def broken(_args: object) -> int:
        raise RuntimeError("something\nthat spans lines")

    monkeypatch.setattr(audit_command, "execute", broken)
    run = kiln("audit", "x.whl")
    assert run.code == 2
    assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr
    assert "RuntimeError: something that spans lines" in run.stderr
    json_run = kiln("audit", "--json", "x.whl")
    assert json_run.code == 2 and json.loads(json_run.stdout)["ok"] is False


@pytest.mark.parametrize("case", CASES)
def test_kiln_repair_refuses_a_hostile_wheel_of_another_project_too(case: str, tmp_path: Path) -> None:
    """kiln repair takes other projects' wheels (repaired as they are, with kiln's excludes and floor); their
    archives pass the same safety rules before auditwheel unpacks anything."""
    ours = _wheel(case, tmp_path / "dist")
    foreign = tmp_path / "foreign" / ("other_ops" + ours.name[len("opkiln"):])
    foreign.parent.mkdir()
    shutil.copyfile(ours, foreign)
    run = kiln("repair", foreign, "-w", tmp_path / "repaired")
    assert run.code == 2, run.stdout + run.stderr
    assert REASONS[case] in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert not (tmp_path / "repaired").exists()


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is needed")
def test_kiln_repair_says_in_one_line_why_auditwheel_cannot_repair_a_foreign_wheel(tmp_path: Path) -> None:
    """Another project's wheel whose library needs one that neither the wheel nor this machine has (as
    torchcodec's needs FFmpeg's): exit 1 and auditwheel's reason in one line, not its log and traceback."""
    import subprocess

    from audit.audit_corpus import make_wheel as make_foreign_wheel

    (tmp_path / "missing.c").write_text("int kiln_missing(void) { return 1; }\n")
    (tmp_path / "needs.c").write_text("int kiln_missing(void);\nint kiln_needs(void) { return kiln_missing(); }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", "libkilnmissing.so", "missing.c"], cwd=tmp_path, check=True)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", "libneeds.so", "needs.c", "-L.", "-lkilnmissing"],
                   cwd=tmp_path, check=True)
    (tmp_path / "dist").mkdir()
    wheel = make_foreign_wheel(tmp_path / "dist", {"other_ops/libneeds.so": (tmp_path / "libneeds.so").read_bytes()},
                               name="other_ops", tag="cp311-cp311-linux_x86_64")
    run = kiln("repair", wheel, "-w", tmp_path / "repaired")
    assert run.code == 1, run.stdout + run.stderr
    assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr, run.stderr
    assert 'libkilnmissing.so" could not be located' in run.stderr, run.stderr
    assert not (tmp_path / "repaired").exists() or not any((tmp_path / "repaired").iterdir())
