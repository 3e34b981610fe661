"""The audit gate of `kiln index` (index/publish.py kiln_audit, _audit_all), in this process: the real
audit judges the staged copy that gets published, a refusal names the wheel of DIST and carries the audit's
report with the copy's path replaced by it, and every way the audit can fail to judge a wheel is a clear
input error (exit 2), never a traceback. tests/index/test_install.py runs the same gate on real wheels."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import kiln_tool.audit
from index.synthetic_wheels import make_wheel
from kiln_tool.audit import AuditInputError
from kiln_tool.index import build_index
from kiln_tool.index.errors import AuditRefusedError, IndexInputError
from kiln_tool.index.manifest import MANIFEST_NAME
from kiln_tool.index.publish import kiln_audit

SO = "opkiln/_C.cpython-311-x86_64-linux-gnu.so"


def test_the_real_audit_passes_a_clean_wheel_and_fails_a_broken_library(tmp_path: Path) -> None:
    clean = make_wheel(tmp_path / "a")
    ok, text = kiln_audit(clean)
    assert ok is True and f"== {clean}: PASS" in text
    broken = make_wheel(tmp_path / "b", extra_files={SO: b"\x7fELF\x02\x01\x01" + bytes(100)})
    ok, text = kiln_audit(broken)
    assert ok is False and f"== {broken}: FAIL" in text and "elf-valid" in text


def _failing(report: str) -> tuple[list[Path], object]:
    seen: list[Path] = []

    def audit(staged: Path) -> tuple[bool, str]:
        seen.append(staged)
        return False, report.replace("STAGED", str(staged))

    return seen, audit


def test_a_refusal_names_the_dist_wheel_and_carries_the_report(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "dist")
    seen, audit = _failing("  == STAGED: FAIL (1 error)\n   ERROR exports  STAGED leaks\n\n   \n")
    with pytest.raises(AuditRefusedError) as caught:
        build_index(tmp_path / "dist", tmp_path / "site", audit=audit)  # type: ignore[arg-type]
    source = wheel.resolve()
    assert str(caught.value) == (f"{wheel.name} failed the audit; not listed:\n"
                                 f"  == {source}: FAIL (1 error)\n   ERROR exports  {source} leaks")
    (staged,) = seen
    assert staged.name == wheel.name and staged.parent != source.parent  # the copy, not DIST's file
    assert not (tmp_path / "site").exists()


def test_every_refused_wheel_is_reported_at_once(tmp_path: Path) -> None:
    make_wheel(tmp_path / "dist")
    make_wheel(tmp_path / "dist", version="0.2.0+pt213cpu")
    seen, audit = _failing("bad")
    with pytest.raises(AuditRefusedError) as caught:
        build_index(tmp_path / "dist", tmp_path / "site", audit=audit)  # type: ignore[arg-type]
    assert len(seen) == 2
    parts = str(caught.value).split("\n\n")
    assert [p.split(" ")[0] for p in parts] == sorted(s.name for s in seen)
    assert all(p.endswith("failed the audit; not listed:\nbad") for p in parts)


def test_a_passing_wheel_is_said_to_have_passed(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "dist")
    said: list[str] = []
    build_index(tmp_path / "dist", tmp_path / "site", audit=lambda _p: (True, "fine"), log=said.append)
    assert f"audited {wheel.name}: ok" in said


@pytest.mark.parametrize(("raised", "message"), [
    (AuditInputError("not a zip"), "the audit cannot read it: not a zip"),
    (ValueError("bad offset\n   in section 3 "), "the audit cannot parse it: bad offset in section 3"),
    (ValueError(""), "the audit cannot parse it: ValueError"),
    (KeyError(), "the audit cannot parse it: KeyError"),
    (ValueError("x" * 300), "the audit cannot parse it: " + "x" * 200),
])
def test_an_audit_that_cannot_judge_a_wheel_is_an_input_error(raised: Exception, message: str, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    def audit_paths(*_args: object, **_kwargs: object) -> object:
        raise raised

    monkeypatch.setattr(kiln_tool.audit, "audit_paths", audit_paths)
    wheel = make_wheel(tmp_path)
    with pytest.raises(IndexInputError) as caught:
        kiln_audit(wheel)
    assert str(caught.value) == f"{wheel.name}: {message}"


def test_without_the_audit_nothing_is_listed_unaudited(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "kiln_tool.audit", None)  # `import kiln_tool.audit` raises ImportError
    wheel = make_wheel(tmp_path / "dist")
    refusal = f"cannot audit {wheel.name}: kiln's audit (kiln_tool.audit) is not importable"
    with pytest.raises(IndexInputError, match=re.escape(refusal)):
        build_index(tmp_path / "dist", tmp_path / "site")
    assert not (tmp_path / "site").exists()


def test_a_refused_run_removes_the_folders_it_made_for_the_site(tmp_path: Path) -> None:
    make_wheel(tmp_path / "dist")
    out = tmp_path / "new" / "parents" / "site"
    with pytest.raises(AuditRefusedError):
        build_index(tmp_path / "dist", out, audit=lambda _p: (False, "no"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dist"]
    build_index(tmp_path / "dist", out, audit=lambda _p: (True, "yes"))
    assert (out / MANIFEST_NAME).is_file()



def test_a_refusal_stays_the_error_when_its_folders_cannot_be_removed(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    make_wheel(tmp_path / "dist")

    def busy(self: Path) -> None:
        raise OSError(16, "Device or resource busy", str(self))

    monkeypatch.setattr(Path, "rmdir", busy)
    with pytest.raises(AuditRefusedError):
        build_index(tmp_path / "dist", tmp_path / "new" / "site", audit=lambda _p: (False, "no"))
