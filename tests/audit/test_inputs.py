"""Unusable input gets a clear message and exit status 2, never a traceback."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from audit_corpus import KILN, PY_SUFFIX, Corpus, make_wheel, run_kiln

from kiln_tool.audit import AuditInputError, AuditOptions, audit_paths


def assert_input_error(result_args: list[str], *needles: str) -> None:
    result = run_kiln("audit", *result_args)
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr


def test_missing_file(tmp_path: Path) -> None:
    assert_input_error([str(tmp_path / "nope.whl")], "no such file")


def test_directory(tmp_path: Path) -> None:
    assert_input_error([str(tmp_path)], "is a directory")


def test_symlink(corpus: Corpus, tmp_path: Path) -> None:
    link = tmp_path / "link.so"
    link.symlink_to(corpus["libplain.so"])
    assert_input_error([str(link)], "symbolic link")


def test_not_a_zip_wheel(tmp_path: Path) -> None:
    fake = tmp_path / "kilntest-0.1.0-cp311-cp311-linux_x86_64.whl"
    fake.write_text("not a zip")
    assert_input_error([str(fake)], "not a zip archive")


def test_badly_named_wheel(tmp_path: Path) -> None:
    fake = tmp_path / "kilntest.whl"
    with zipfile.ZipFile(fake, "w") as zf:
        zf.writestr("x", b"")
    assert_input_error([str(fake)], "not a wheel file name")


def test_loose_file_that_is_not_elf(tmp_path: Path) -> None:
    text = tmp_path / "libtext.so"
    text.write_text("hello\n")
    assert_input_error([str(text)], "not an ELF file")


def test_zip_bomb(tmp_path: Path) -> None:
    bomb = tmp_path / "kilntest-0.1.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        zf.writestr("kilntest/zeros.bin", b"\0" * (8 << 20))
    assert_input_error([str(bomb)], "zip bomb", "kilntest/zeros.bin")


def test_symlink_inside_wheel(corpus: Corpus, tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, {f"kilntest/clean{PY_SUFFIX}": corpus[f"clean{PY_SUFFIX}"].read_bytes()})
    with zipfile.ZipFile(wheel, "a") as zf:
        info = zipfile.ZipInfo("kilntest/libevil.so")
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(info, "/etc/passwd")
    assert_input_error([str(wheel)], "kilntest/libevil.so", "symbolic link")


def test_member_outside_site_packages(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, {"../evil.so": b"x"})
    assert_input_error([str(wheel)], "outside site-packages")


def test_huge_file(tmp_path: Path) -> None:
    huge = tmp_path / "libhuge.so"
    with huge.open("wb") as f:
        f.truncate(5 << 30)  # sparse: takes no disk space
    assert_input_error([str(huge)], "larger than the audit's limit")


def test_unknown_policy_and_bad_arch_list(corpus: Corpus) -> None:
    assert_input_error(["--policy", "manylinux_9_99", str(corpus["libplain.so"])], "no audit policy")
    assert_input_error(["--cuda-archs", "8.0;sm_90", str(corpus["libplain.so"])], "'sm_90' is not a CUDA arch")


def test_bad_torch_lib(corpus: Corpus, tmp_path: Path) -> None:
    assert_input_error(["--torch-lib", str(tmp_path), str(corpus["libplain.so"])], "no libc10.so")


def test_json_error_document(tmp_path: Path) -> None:
    result = run_kiln("audit", "--json", str(tmp_path / "nope.so"))
    assert result.returncode == 2
    assert json.loads(result.stdout) == {"schema": 1, "ok": False, "error": f"{tmp_path / 'nope.so'}: no such file"}


def test_api_raises_value_error(tmp_path: Path) -> None:
    with pytest.raises(AuditInputError) as excinfo:
        audit_paths([tmp_path], AuditOptions())
    assert isinstance(excinfo.value, ValueError)


def test_unreadable_is_checked_before_any_work(corpus: Corpus, tmp_path: Path) -> None:
    # One bad path stops the run before the good one is audited: the pipeline gets exit 2, not a partial report.
    result = run_kiln("audit", str(corpus["libplain.so"]), str(tmp_path / "missing.so"))
    assert result.returncode == 2 and result.stdout == ""


def _as_reader(*args: str) -> subprocess.CompletedProcess[str]:
    """kiln in a child that file permissions bind: as root (CI), without the capabilities that let root read
    any file (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH dropped from the child's bounding set by setpriv)."""
    command = [sys.executable, str(KILN), *args]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        assert setpriv, "setpriv (util-linux) is missing: as root, this test needs it to drop capabilities"
        command = [setpriv, "--bounding-set=-dac_override,-dac_read_search", "--", *command]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def test_permission_denied(corpus: Corpus, tmp_path: Path) -> None:
    """A file the auditing user may not read: exit 2 naming it, no traceback (root included: see _as_reader)."""
    locked = tmp_path / "liblocked.so"
    locked.write_bytes(corpus["libplain.so"].read_bytes())
    locked.chmod(0)
    result = _as_reader("audit", str(locked))
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    assert "liblocked.so" in result.stderr and "ermission denied" in result.stderr, result.stderr
    # The same child, the file readable: the refusal above was the permission, not the file.
    locked.chmod(0o644)
    readable = _as_reader("audit", str(locked))
    assert readable.returncode != 2, readable.stderr


def test_small_wheels_unpack_to_a_tmpfs_and_large_ones_or_a_chosen_tmpdir_to_the_usual_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kiln_tool.audit import inputs

    def infos(total: int) -> dict[str, zipfile.ZipInfo]:
        info = zipfile.ZipInfo("pkg/lib.so")
        info.file_size = total
        return {"pkg/lib.so": info}

    shm = tmp_path / "shm"
    shm.mkdir()
    monkeypatch.setattr(inputs, "_TMPFS", shm)
    monkeypatch.delenv("TMPDIR", raising=False)
    small = inputs._scratch(infos(1 << 20))
    assert Path(small.name).parent == shm
    small.cleanup()
    large = inputs._scratch(infos(inputs._TMPFS_MAX_WHEEL_BYTES + 1))
    assert Path(large.name).parent != shm  # a big wheel's libraries never fill memory
    large.cleanup()
    monkeypatch.setattr(inputs, "_TMPFS", tmp_path / "missing")
    absent = inputs._scratch(infos(1 << 20))
    assert Path(absent.name).is_dir()
    absent.cleanup()
    monkeypatch.setattr(inputs, "_TMPFS", shm)
    chosen = tmp_path / "chosen"
    chosen.mkdir()
    monkeypatch.setenv("TMPDIR", str(chosen))
    monkeypatch.setattr(inputs.tempfile, "tempdir", None)  # tempfile reads TMPDIR again
    kept = inputs._scratch(infos(1 << 20))
    assert Path(kept.name).parent == chosen  # the user's choice of folder stands
    kept.cleanup()
