"""The wheel's own checks rule by rule (audit/checks/wheel.py): RECORD against what the wheel holds, and the
wheel's name, WHEEL tags, build info, torch pin and platform floor against each other and its binaries. Each
defect is built as a real wheel (the zip a backend writes, then one thing broken) and named with the words a
maintainer reads; what a right wheel is told, too."""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from audit_corpus import PY_SUFFIX, Corpus, installed_torch, make_wheel, record_line

from kiln_tool.audit import AuditOptions, CheckResult, audit_paths
from kiln_tool.audit.context import ReleaseRule

DIST = "kilntest-0.1.0.dist-info"
RECORD = f"{DIST}/RECORD"
RECORD_FIX = ("rewrite RECORD after changing files (auditwheel repair and `wheel pack` do this); never edit a wheel "
              "with a zip tool.")
TAG_FIX = ("let the build name the wheel (scikit-build-core tags from the interpreter, the version's local part and "
           "torch pin come from the torch built against), repair with auditwheel using --plat at or above torch's "
           "manylinux floor, and never rename wheel files by hand.")
FILES = {"kilntest/__init__.py": b"x = 1\n", "kilntest/data.txt": b"some data\n"}


def _wheel_checks(wheel: Path, options: AuditOptions | None = None) -> list[CheckResult]:
    (artifact,) = audit_paths([wheel], options or AuditOptions()).artifacts
    return list(artifact.checks)


def _check(wheel: Path, check_id: str, options: AuditOptions | None = None) -> CheckResult:
    (check,) = [c for c in _wheel_checks(wheel, options) if c.id == check_id and not c.finding]
    return check


def _digest(data: bytes, algorithm: str) -> str:
    return base64.urlsafe_b64encode(hashlib.new(algorithm, data).digest()).rstrip(b"=").decode()


def _with_record(tmp: Path, record: bytes, files: dict[str, bytes] = FILES) -> Path:
    """A wheel as the backend wrote it, then its RECORD replaced by these bytes."""
    return make_wheel(tmp, files, extra_members={RECORD: record})


def _rows(*rows: str) -> bytes:
    return ("\n".join(rows) + "\n").encode()


# ---- record -------------------------------------------------------------------------------------------------------


def test_a_wheel_without_record_is_named_with_its_dist_info(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, FILES, record=False)
    check = _check(wheel, "record")
    assert not check.ok
    assert check.detail == f"{wheel.name} has no {RECORD}."
    assert check.fix == "build the wheel with a PEP 517 backend, which writes RECORD; never edit a wheel by hand."


@pytest.mark.parametrize("dist_infos", [(), ("kilntest-0.1.0.dist-info", "other-1.0.dist-info")])
def test_without_exactly_one_dist_info_there_is_no_record_to_read(tmp_path: Path, dist_infos: tuple[str, ...]) -> None:
    path = tmp_path / "kilntest-0.1.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("kilntest/__init__.py", b"")
        for dist in dist_infos:
            zf.writestr(f"{dist}/RECORD", f"kilntest/__init__.py,,\n{dist}/RECORD,,\n")
    checks = {c.id: c for c in _wheel_checks(path) if not c.finding}
    assert checks["record"].detail == f"{path.name} has no <name>.dist-info/RECORD."
    assert not checks["wheel-tag"].ok
    assert checks["wheel-tag"].detail.startswith(f"{path.name}: the dist-info WHEEL file is missing or has no Tag "
                                                 "lines")


def test_a_record_that_is_not_utf8_is_not_read(tmp_path: Path) -> None:
    wheel = _with_record(tmp_path, b"kilntest/__init__.py,sha256=\xff,6\n")
    check = _check(wheel, "record")
    try:
        b"kilntest/__init__.py,sha256=\xff,6\n".decode("utf-8")
    except UnicodeDecodeError as exc:
        reason = str(exc)
    assert not check.ok
    assert check.detail == f"{RECORD} is not a readable CSV file ({reason})."
    assert check.fix == "rebuild the wheel; RECORD is written by the build backend."


def test_a_record_that_is_not_csv_is_not_read(tmp_path: Path) -> None:
    wheel = _with_record(tmp_path, b"kilntest/__init__.py," + b"x" * 200_000 + b",6\n")
    check = _check(wheel, "record")
    assert not check.ok
    assert check.detail.startswith(f"{RECORD} is not a readable CSV file (field larger than field limit")


def _good_rows(tmp: Path, files: dict[str, bytes] = FILES) -> list[str]:
    """The rows a backend writes for these files, METADATA and WHEEL (read back from a correct wheel)."""
    (tmp / "good").mkdir()
    good = make_wheel(tmp / "good", files)
    with zipfile.ZipFile(good) as zf:
        return [r for r in zf.read(RECORD).decode().splitlines() if r]


def test_a_right_record_counts_its_entries_and_empty_rows_are_skipped(tmp_path: Path) -> None:
    rows = _good_rows(tmp_path)
    # A blank line first: every row after it is still read.
    wheel = _with_record(tmp_path, _rows("", *rows))
    check = _check(wheel, "record")
    assert check.ok, check.detail
    assert check.detail == f"{len(rows)} RECORD entries match"


@pytest.mark.parametrize("algorithm", ["sha384", "sha512"])
def test_the_stronger_hashes_are_accepted_and_checked(tmp_path: Path, algorithm: str) -> None:
    rows = [r for r in _good_rows(tmp_path) if not r.startswith("kilntest/__init__.py,")]
    data = FILES["kilntest/__init__.py"]
    right = _with_record(tmp_path, _rows(f"kilntest/__init__.py,{algorithm}={_digest(data, algorithm)},{len(data)}",
                                         *rows))
    assert _check(right, "record").ok
    (tmp_path / "wrong").mkdir()
    wrong_digest = _digest(b"other\n", algorithm)
    wrong = _with_record(tmp_path / "wrong", _rows(f"kilntest/__init__.py,{algorithm}={wrong_digest},", *rows))
    check = _check(wrong, "record")
    assert not check.ok
    assert check.detail.startswith(f"{RECORD}: kilntest/__init__.py: {algorithm} {_digest(data, algorithm)} differs "
                                   f"from RECORD's {wrong_digest}. ")


def test_each_record_defect_is_named(tmp_path: Path) -> None:
    files = {**FILES, "kilntest/extra.py": b"y = 2\n", "kilntest/short.txt": b"abc\n", "kilntest/md5.txt": b"m\n",
             "kilntest/bare.txt": b"b\n"}
    rows = {r.split(",", 1)[0]: r for r in _good_rows(tmp_path, files)}
    init = FILES["kilntest/__init__.py"]
    record = _rows(
        f"kilntest/__init__.py,sha256={_digest(b'x = 2' + bytes(1), 'sha256')},{len(init)}",  # another file's hash
        f"kilntest/data.txt,{rows['kilntest/data.txt'].split(',')[1]},999",  # right hash, wrong size
        "kilntest/short.txt,sha256=abc",  # two fields
        f"kilntest/md5.txt,md5={_digest(b'm', 'md5')},2",
        "kilntest/bare.txt,sha256=,2",
        "kilntest/gone.py,sha256=AAAA,1",
        rows[f"{DIST}/METADATA"], rows[f"{DIST}/WHEEL"], f"{RECORD},,",
    )
    wheel = _with_record(tmp_path, record, files)
    check = _check(wheel, "record")
    assert not check.ok
    problems = [
        "malformed RECORD row ['kilntest/short.txt', 'sha256=abc']",
        f"kilntest/__init__.py: sha256 {_digest(init, 'sha256')} differs from RECORD's "
        f"{_digest(b'x = 2' + bytes(1), 'sha256')}",
        "kilntest/bare.txt: hash 'sha256=' is not sha256/384/512",
        "kilntest/data.txt: 10 bytes, RECORD says 999",
        "kilntest/extra.py is not in RECORD",
        f"kilntest/md5.txt: hash 'md5={_digest(b'm', 'md5')}' is not sha256/384/512",
        "kilntest/short.txt is not in RECORD",
        "RECORD lists kilntest/gone.py, which the wheel does not hold",
    ]
    # Rows are read first (a malformed one as it comes), then members in name order, then what RECORD lists
    # that is not there; six are shown.
    shown = "; ".join(problems[:6]) + f"; and {len(problems) - 6} more"
    assert check.detail == (f"{RECORD}: {shown}. pip refuses (or silently installs) a wheel whose files do not match "
                            "RECORD.")
    assert check.fix == RECORD_FIX


@pytest.mark.parametrize("count", [6, 7])
def test_six_problems_are_shown_whole_and_more_are_counted(tmp_path: Path, count: int) -> None:
    files = {f"kilntest/m{i}.txt": b"%d\n" % i for i in range(count)}
    rows = {r.split(",", 1)[0]: r for r in _good_rows(tmp_path, files)}
    wheel = _with_record(tmp_path, _rows(rows[f"{DIST}/METADATA"], rows[f"{DIST}/WHEEL"], f"{RECORD},,"), files)
    check = _check(wheel, "record")
    listed = "; ".join(f"kilntest/m{i}.txt is not in RECORD" for i in range(6))
    more = "; and 1 more" if count == 7 else ""
    assert check.detail == (f"{RECORD}: {listed}{more}. pip refuses (or silently installs) a wheel whose files do not "
                            "match RECORD.")


def test_a_listed_file_the_wheel_lacks_and_a_padded_hash_are_named(tmp_path: Path) -> None:
    rows = _good_rows(tmp_path)
    data = FILES["kilntest/data.txt"]
    padded = [r if not r.startswith("kilntest/data.txt,") else f"kilntest/data.txt,sha256={_digest(data, 'sha256')}=,"
              for r in rows]
    wheel = _with_record(tmp_path, _rows(*padded, "kilntest/gone.py,sha256=AAAA,1"))
    assert _check(wheel, "record").detail == (
        f"{RECORD}: kilntest/data.txt: sha256 {_digest(data, 'sha256')} differs from RECORD's "
        f"{_digest(data, 'sha256')}=; RECORD lists kilntest/gone.py, which the wheel does not hold. pip refuses (or "
        "silently installs) a wheel whose files do not match RECORD.")


def test_a_digest_that_ends_in_any_letter_is_compared_whole(tmp_path: Path) -> None:
    # Only the base64 padding is taken off a digest: a sha384 one (64 characters, no padding) that ends in X is
    # kept whole.
    body = next(b"%d\n" % i for i in range(10_000) if _digest(b"%d\n" % i, "sha384").endswith("X"))
    rows = [r for r in _good_rows(tmp_path) if not r.startswith("kilntest/")]
    wheel = _with_record(tmp_path, _rows(f"kilntest/x.txt,sha384={_digest(body, 'sha384')},{len(body)}", *rows),
                         {"kilntest/x.txt": body})
    check = _check(wheel, "record")
    assert check.ok, check.detail


def test_signatures_and_folders_need_no_record_row_and_an_empty_size_is_not_checked(tmp_path: Path) -> None:
    rows = [r if not r.startswith("kilntest/data.txt,") else r.rsplit(",", 1)[0] + ","
            for r in _good_rows(tmp_path)]
    wheel = _with_record(tmp_path, _rows(*rows))
    signed = tmp_path / "signed" / wheel.name
    signed.parent.mkdir()
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(signed, "w") as dst:
        for info in src.infolist():
            dst.writestr(info, src.read(info))
        dst.writestr("kilntest/", b"")
        dst.writestr(f"{DIST}/RECORD.jws", b"{}")
        dst.writestr(f"{DIST}/RECORD.p7s", b"sig")
    check = _check(signed, "record")
    assert check.ok, check.detail
    assert check.detail == f"{len(rows)} RECORD entries match"


# ---- wheel-tag -----------------------------------------------------------------------------------------------------


def _tag_problems(check: CheckResult, wheel: Path) -> list[str]:
    assert not check.ok and check.fix == TAG_FIX
    prefix = f"{wheel.name}: "
    assert check.detail.startswith(prefix) and check.detail.endswith(".")
    return check.detail[len(prefix):-1].split("; ")


def _rewrite(wheel: Path, out: Path, member: str, data: bytes) -> Path:
    """The wheel with one member's bytes replaced (RECORD rewritten to match: only that member differs)."""
    out.mkdir(parents=True, exist_ok=True)
    target = out / wheel.name
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(target, "w") as dst:
        for info in src.infolist():
            body = data if info.filename == member else src.read(info)
            if info.filename == RECORD:
                body = "".join(line + "\n" if not line.startswith(f"{member},") else record_line(member, data) + "\n"
                               for line in src.read(info).decode().splitlines()).encode()
            dst.writestr(info, body)
    return target


EXPANDED = ("cp311-cp311-manylinux_2_28_x86_64", "cp311-cp312-manylinux_2_28_x86_64",
            "cp312-cp311-manylinux_2_28_x86_64", "cp312-cp312-manylinux_2_28_x86_64")


def test_wheel_tags_that_differ_from_the_file_name(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, FILES, tag="cp311.cp312-cp311.cp312-manylinux_2_28_x86_64")
    check = _check(wheel, "wheel-tag")
    assert check.ok, check.detail
    # The WHEEL file names one of the two Pythons only.
    narrowed = _rewrite(wheel, tmp_path / "narrow", f"{DIST}/WHEEL",
                        b"Wheel-Version: 1.0\nTag: cp311-cp311-manylinux_2_28_x86_64\n")
    assert _check(narrowed, "record").ok
    assert _tag_problems(_check(narrowed, "wheel-tag"), narrowed) == [
        f"WHEEL declares tags cp311-cp311-manylinux_2_28_x86_64 but the file name says {', '.join(EXPANDED)}"]
    two = _rewrite(wheel, tmp_path / "two", f"{DIST}/WHEEL",
                   b"Wheel-Version: 1.0\nTag: cp312-cp312-manylinux_2_28_x86_64\n"
                   b"Tag: cp311-cp311-manylinux_2_28_x86_64\n")
    assert _tag_problems(_check(two, "wheel-tag"), two) == [
        "WHEEL declares tags cp311-cp311-manylinux_2_28_x86_64, cp312-cp312-manylinux_2_28_x86_64 but the file name "
        f"says {', '.join(EXPANDED)}"]
    # The compressed set on one line is not the four tags it stands for.
    compressed = _rewrite(wheel, tmp_path / "compressed", f"{DIST}/WHEEL",
                          b"Wheel-Version: 1.0\nTag: cp311.cp312-cp311.cp312-manylinux_2_28_x86_64\n")
    assert _tag_problems(_check(compressed, "wheel-tag"), compressed) == [
        "WHEEL declares tags cp311.cp312-cp311.cp312-manylinux_2_28_x86_64 but the file name says "
        f"{', '.join(EXPANDED)}"]
    # Tag lines with spaces around them are the same tags.
    spaced = _rewrite(wheel, tmp_path / "spaced", f"{DIST}/WHEEL",
                      b"Wheel-Version: 1.0\n" + b"".join(b"Tag:  %s \n" % t.encode() for t in EXPANDED))
    assert _check(spaced, "wheel-tag").ok
    untagged = _rewrite(wheel, tmp_path / "untagged", f"{DIST}/WHEEL", b"Wheel-Version: 1.0\n")
    assert _tag_problems(_check(untagged, "wheel-tag"), untagged) == [
        "the dist-info WHEEL file is missing or has no Tag lines"]


def test_a_right_wheel_says_what_agrees_and_notes_a_tag_without_a_manylinux_claim(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, FILES, tag="py3-none-linux_x86_64")
    check = _check(wheel, "wheel-tag")
    assert check.ok
    assert check.detail == ("tags and binaries agree; not checked: local version and CUDA"
                            " variant against the build (the wheel has no kiln build info) (no torch is required or "
                            "linked: torch's platform floor does not apply; platform tag linux_x86_64 makes no "
                            "manylinux claim (`kiln repair` assigns one))")
    (other := tmp_path / "many").mkdir()
    claimed = make_wheel(other, FILES, tag="py3-none-manylinux_2_28_x86_64")
    assert _check(claimed, "wheel-tag").detail == ("tags and binaries agree; not checked: local version and CUDA"
                                                   " variant against the build (the wheel has no kiln build info) "
                                                   "(no torch is required or linked: torch's platform floor does "
                                                   "not apply)")


@pytest.fixture
def module(corpus: Corpus) -> bytes:
    """An extension module of this interpreter (PyInit_clean), as bytes."""
    return corpus[f"clean{PY_SUFFIX}"].read_bytes()


def test_an_extension_module_is_held_to_the_wheels_python_abi_and_platform(tmp_path: Path, module: bytes) -> None:
    name = "kilntest/clean.cpython-39-aarch64-linux-gnu.so"
    wheel = make_wheel(tmp_path, {name: module}, tag="cp311-cp311-manylinux_2_28_x86_64")
    assert _tag_problems(_check(wheel, "wheel-tag"), wheel) == [
        f"{name} is built for cp39 but the wheel is tagged cp311-cp311",
        f"{name} is built for aarch64, the platform tag says manylinux_2_28_x86_64"]
    # The Python tag alone right, the ABI tag wrong: still a mismatch.
    (abi := tmp_path / "abi").mkdir()
    right_name = f"kilntest/clean{PY_SUFFIX}"
    py = PY_SUFFIX.split("-")[1]
    wheel = make_wheel(abi, {right_name: module}, tag=f"cp{py}-none-manylinux_2_28_x86_64")
    assert _tag_problems(_check(wheel, "wheel-tag"), wheel) == [
        f"{right_name} is built for cp{py} but the wheel is tagged cp{py}-none"]


def test_an_abi3_module_needs_the_abi3_tag(tmp_path: Path, corpus: Corpus) -> None:
    name = "kilntest/plain.abi3.so"
    wheel = make_wheel(tmp_path, {name: corpus["libplain.so"].read_bytes()}, tag="cp311-cp311-manylinux_2_28_x86_64")
    assert _tag_problems(_check(wheel, "wheel-tag"), wheel) == [
        f"{name} is a stable-ABI (abi3) module but the ABI tag is cp311"]
    (right := tmp_path / "right").mkdir()
    wheel = make_wheel(right, {name: corpus["libplain.so"].read_bytes()}, tag="cp310-abi3-manylinux_2_28_x86_64")
    assert _check(wheel, "wheel-tag").ok


def test_an_op_library_named_like_a_module_is_not_held_to_the_python_tag(tmp_path: Path, corpus: Corpus) -> None:
    # It registers torch operators and defines no PyInit_*: torch.ops.load_library loads it by path.
    wheel = make_wheel(tmp_path, {"kilntest/_C.cpython-39-aarch64-linux-gnu.so": corpus["libregister.so"].read_bytes()})
    assert _check(wheel, "wheel-tag").ok
    # An extension module after it is still held to the tags.
    (more := tmp_path / "more").mkdir()
    name = "kilntest/clean.cpython-39-x86_64-linux-gnu.so"
    wheel = make_wheel(more, {"kilntest/_C.cpython-39-aarch64-linux-gnu.so": corpus["libregister.so"].read_bytes(),
                              name: corpus[f"clean{PY_SUFFIX}"].read_bytes()})
    assert _tag_problems(_check(wheel, "wheel-tag"), wheel) == [
        f"{name} is built for cp39 but the wheel is tagged cp311-cp311"]


def test_build_info_that_disagrees_with_the_wheel(tmp_path: Path) -> None:
    info = {"version": "0.2.0", "python_tag": "cp312-cp312", "cuda": None, "torch_version": "2.13.0+cpu",
            "cuda_tag": "cpu"}
    wheel = make_wheel(tmp_path, FILES, version="0.1.0+pt212cpu", build_info=info, requires=("torch==2.13.0",))
    assert _tag_problems(_check(wheel, "wheel-tag"), wheel) == [
        "build info says version 0.2.0, the wheel 0.1.0+pt212cpu",
        "build info says cp312-cp312, the wheel is tagged cp311",
        "local version '+pt212cpu' does not name the build's torch and CUDA ('+pt213cpu')"]
    (right := tmp_path / "right").mkdir()
    wheel = make_wheel(right, FILES, version="0.1.0+pt213cpu", requires=("torch==2.13.0",),
                       build_info={**info, "version": "0.1.0+pt213cpu", "python_tag": "cp311-cp311"})
    assert _check(wheel, "wheel-tag").ok
    # No local version: nothing to compare; no version in the build info: nothing to compare either.
    (plain := tmp_path / "plain").mkdir()
    wheel = make_wheel(plain, FILES, requires=("torch==2.13.0",),
                       build_info={"torch_version": "2.13.0+cpu", "cuda": None, "cuda_tag": "cu130"})
    assert _check(wheel, "wheel-tag").ok


def test_a_local_version_without_a_cuda_tag_in_the_build_info_is_a_cpu_build(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, FILES, version="0.1.0+pt213cu130", requires=("torch==2.13.0",),
                       build_info={"torch_version": "2.13.0", "cuda": None})
    assert _tag_problems(_check(wheel, "wheel-tag"), wheel) == [
        "local version '+pt213cu130' does not name the build's torch and CUDA ('+pt213cpu')"]


@pytest.mark.parametrize(("requires", "problem"), [
    ((), "METADATA has no torch requirement, but the binaries only work with torch 2.13.0"),
    (("torch (==2.13.*,<)",), "torch requirement '==2.13.*,<' does not parse"),
    (("torch==2.12.5",), "torch requirement 'torch==2.12.5' excludes torch 2.13.0, the build's torch"),
    (("torch>=2.13",), "torch requirement 'torch>=2.13' allows torch 2.14.0, whose C++ ABI differs from 2.13.0's "
                       "(pin 2.13.*)"),
    (("torch<2.14",), "torch requirement 'torch<2.14' allows torch 2.12.0, whose C++ ABI differs from 2.13.0's "
                      "(pin 2.13.*)"),
    (("torch!=2.14.0",), "torch requirement 'torch!=2.14.0' allows torch 2.12.0, whose C++ ABI differs from "
                         "2.13.0's (pin 2.13.*)"),
    (("torch>=2.12,<2.15",), "torch requirement 'torch>=2.12,<2.15' allows torch 2.12.0, 2.14.0, whose C++ ABI "
                             "differs from 2.13.0's (pin 2.13.*)"),
])
def test_the_torch_pin_is_held_to_the_build_torch(tmp_path: Path, requires: tuple[str, ...], problem: str) -> None:
    wheel = make_wheel(tmp_path, FILES, requires=requires, build_info={"torch_version": "2.13.0+cpu", "cuda": None})
    assert _tag_problems(_check(wheel, "wheel-tag"), wheel) == [problem]


def test_a_pin_on_the_first_minor_has_no_older_abi_to_leak_to(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, FILES, requires=("torch<3.1",), build_info={"torch_version": "3.0.1", "cuda": None})
    assert _check(wheel, "wheel-tag").ok
    (loose := tmp_path / "loose").mkdir()
    wheel = make_wheel(loose, FILES, requires=("torch>=3.0",), build_info={"torch_version": "3.0.1", "cuda": None})
    assert _tag_problems(_check(wheel, "wheel-tag"), wheel) == [
        "torch requirement 'torch>=3.0' allows torch 3.1.0, whose C++ ABI differs from 3.0.1's (pin 3.0.*)"]


def test_a_nightly_torch_is_within_a_pin_that_contains_it(tmp_path: Path) -> None:
    # A pin that names no pre-release still holds the nightly it was built against (PEP 440 orders 2.14.0.dev
    # between 2.13.99 and 2.15); prereleases are never excluded by default here.
    wheel = make_wheel(tmp_path, FILES, requires=("torch>2.13.99,<2.15",),
                       build_info={"torch_version": "2.14.0.dev20261101+cpu", "cuda": None})
    assert _check(wheel, "wheel-tag").ok
    (apart := tmp_path / "apart").mkdir()
    wheel = make_wheel(apart, FILES, requires=("torch>=2.14.0,<2.15",),
                       build_info={"torch_version": "2.14.0.dev20261101+cpu", "cuda": None})
    assert _tag_problems(_check(wheel, "wheel-tag"), wheel) == [
        "torch requirement 'torch>=2.14.0,<2.15' excludes torch 2.14.0.dev20261101, the build's torch"]


STABLE = {"abi_mode": "stable", "torch_version": "2.13.0+cpu", "torch_min": "2.11", "cuda": None, "cuda_tag": "cpu"}


@pytest.mark.parametrize(("requires", "info", "problems"), [
    (("torch>=2.11",), STABLE, []),
    (("torch>=2.11,<3",), STABLE, []),
    (("torch>=2.10",), STABLE, ["torch requirement 'torch>=2.10' allows torch older than the stable-ABI floor 2.11"]),
    (("torch>=2.12",), STABLE, ["torch requirement 'torch>=2.12' excludes torch 2.11, the stable-ABI floor the "
                                "binaries were compiled for"]),
    (("torch>=1.0",), {**STABLE, "torch_min": "2.0"},
     ["torch requirement 'torch>=1.0' allows torch older than the stable-ABI floor 2.0"]),
    (("torch>=2.0",), {**STABLE, "torch_min": "2.0"}, []),
    (("torch>=1.0",), {**STABLE, "torch_min": None}, []),
    # A nightly floor is within a pin that names no pre-release.
    (("torch>2.14.99",), {**STABLE, "torch_version": "2.15.0.dev20261101+cpu", "torch_min": "2.15.0.dev20261101"}, []),
])
def test_a_stable_abi_pin_starts_at_its_floor(tmp_path: Path, requires: tuple[str, ...], info: dict[str, object],
                                             problems: list[str]) -> None:
    wheel = make_wheel(tmp_path, FILES, requires=requires, build_info=info)
    check = _check(wheel, "wheel-tag")
    if problems:
        assert _tag_problems(check, wheel) == problems
    else:
        assert check.ok, check.detail


def _release(tmp: Path, tags: tuple[str, ...], rule: ReleaseRule) -> CheckResult:
    """The release rule's result for a wheel with these platform tags (the other wheel-tag results left out)."""
    out = tmp / "-".join(tags)
    out.mkdir()
    wheel = make_wheel(out, FILES, tag=f"py3-none-{'.'.join(tags)}")
    (check,) = [c for c in _wheel_checks(wheel, AuditOptions(release=rule)) if c.id == "wheel-tag" and (
        c.finding in ("above-release-floor", "standin-tag") or c.detail.startswith(("release:", "STAND-IN run:")))]
    return check


def test_a_release_wheel_is_tagged_at_the_floor(tmp_path: Path) -> None:
    floor = ReleaseRule(floor=(2, 28))
    ok = _release(tmp_path, ("manylinux_2_17_x86_64", "manylinux_2_28_x86_64"), floor)
    assert ok.ok and ok.detail == "release: tagged at or below the release floor manylinux_2_28"
    above = _release(tmp_path, ("manylinux_2_28_x86_64", "manylinux_2_34_x86_64", "linux_x86_64"), floor)
    assert not above.ok and above.finding == "above-release-floor"
    name = "kilntest-0.1.0-py3-none-manylinux_2_28_x86_64.manylinux_2_34_x86_64.linux_x86_64.whl"
    assert above.detail == (f"{name}: a release wheel must be tagged at the release floor manylinux_2_28 "
                            "(the build matrix's manylinux_floor), so it installs wherever torch does; it is tagged "
                            "manylinux_2_34_x86_64, linux_x86_64: it was built outside the manylinux_2_28 image.")
    # What an adopter has: kiln's command, not opkiln's docker/Dockerfile or data/matrix.json.
    assert above.fix == ("build the release wheels with `kiln cibuildwheel` (it builds, repairs and audits them in the "
                         "manylinux_2_28 image), not `kiln wheels`, which builds on this machine.")
    assert "docker/" not in above.fix + above.detail and "data/" not in above.fix + above.detail


def test_a_standin_run_is_held_to_its_bases_one_tag(tmp_path: Path) -> None:
    standin = ReleaseRule(floor=(2, 28), standin_tag="manylinux_2_36")
    ok = _release(tmp_path, ("manylinux_2_36_x86_64",), standin)
    assert ok.ok and ok.detail == ("STAND-IN run: tagged manylinux_2_36 as its base (glibc) gives, not the release "
                                   "floor manylinux_2_28; not a release wheel")
    two = _release(tmp_path, ("manylinux_2_28_x86_64", "manylinux_2_36_x86_64"), standin)
    assert two.detail.endswith("but the wheel is tagged manylinux_2_28_x86_64.manylinux_2_36_x86_64.")
    wrong = _release(tmp_path, ("manylinux_2_28_x86_64",), standin)
    assert not wrong.ok and wrong.finding == "standin-tag"
    assert wrong.detail == ("kilntest-0.1.0-py3-none-manylinux_2_28_x86_64.whl: built in a STAND-IN base that gives "
                            "manylinux_2_36, but the wheel is tagged manylinux_2_28_x86_64.")
    assert wrong.fix == "repair with kiln repair in the same image; data/containers.json names the tag its base gives."


def _cudart_user(tmp: Path, *majors: int) -> bytes:
    """A library that needs libcudart.so.<major> for each major (linked against stub runtimes of those sonames)."""
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "stub.c").write_text("int cudaGetDeviceCount(int *n) { *n = 0; return 0; }\n")
    (tmp / "user.c").write_text("int cudaGetDeviceCount(int *);\n"
                                '__attribute__((visibility("default"))) int kiln_count(void) '
                                "{ int n; cudaGetDeviceCount(&n); return n; }\n")
    links = []
    for major in majors:
        (tmp / f"cu{major}").mkdir()
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", f"cu{major}/libcudart.so.{major}", "stub.c",
                        f"-Wl,-soname,libcudart.so.{major}"], check=True, capture_output=True, cwd=tmp)
        links.append(f"cu{major}/libcudart.so.{major}")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", "libuser.so", "user.c", "-Wl,--no-as-needed", *links],
                   check=True, capture_output=True, cwd=tmp)
    return (tmp / "libuser.so").read_bytes()


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is needed")
def test_the_cuda_runtime_the_binaries_need_is_held_to_the_build_and_the_torch(tmp_path: Path) -> None:
    both = {"kilntest/libuser.so": _cudart_user(tmp_path / "both", 12, 13)}
    cpu = make_wheel(tmp_path, both, build_info={"cuda": None})
    assert _tag_problems(_check(cpu, "wheel-tag"), cpu) == [
        "a CPU build (build info cuda: null) whose binaries need libcudart.so.12"]
    (cu13 := tmp_path / "cu13").mkdir()
    wheel = make_wheel(cu13, both, build_info={"cuda": "13.0"})
    assert _tag_problems(_check(wheel, "wheel-tag"), wheel) == [
        "built for CUDA 13.0 but the binaries need libcudart.so.12, libcudart.so.13"]
    twelve = {"kilntest/libuser.so": _cudart_user(tmp_path / "twelve", 12)}
    (right := tmp_path / "right").mkdir()
    wheel = make_wheel(right, twelve, build_info={"cuda": "12.8"})
    assert _check(wheel, "wheel-tag").ok
    # Against a CUDA 13 torch (recorded in data/torch_abi), the CUDA 12 runtime is the wrong one.
    (torch13 := tmp_path / "torch13").mkdir()
    wheel = make_wheel(torch13, twelve)
    check = _check(wheel, "wheel-tag", AuditOptions(torch_version="2.14.1+cu130"))
    assert _tag_problems(check, wheel) == [
        "the binaries need libcudart.so.12 but torch 2.14.1+cu130 ships CUDA 13"]
    thirteen = {"kilntest/libuser.so": _cudart_user(tmp_path / "thirteen", 13)}
    (match := tmp_path / "match").mkdir()
    wheel = make_wheel(match, thirteen)
    assert _check(wheel, "wheel-tag", AuditOptions(torch_version="2.14.1+cu130")).ok
    # A CPU torch ships no CUDA: nothing to compare.
    assert _check(wheel, "wheel-tag", AuditOptions(torch_version="2.13.0+cpu")).ok


def test_a_tag_below_torchs_own_floor_is_a_warning_with_its_fix(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, FILES, tag="py3-none-manylinux_2_17_x86_64.manylinux_2_28_x86_64")
    results = _wheel_checks(wheel, AuditOptions(torch_version="2.14.1+cu130"))
    (below,) = [c for c in results if c.id == "wheel-tag" and c.finding == "below-floor"]
    assert below.is_warning
    assert below.detail == (f"{wheel.name}: platform tag manylinux_2_17_x86_64 is below manylinux_2_28, the floor of "
                            "torch 2.14.1+cu130's own wheel: pip would install it where torch itself cannot run.")
    assert below.fix == "repair with auditwheel --plat at or above torch's own manylinux tag."
    assert not [c for c in results if c.finding == "floor-unknown"]
    (at := tmp_path / "at").mkdir()
    wheel = make_wheel(at, FILES, tag="py3-none-manylinux_2_28_x86_64")
    assert not [c for c in _wheel_checks(wheel, AuditOptions(torch_version="2.14.1+cu130")) if c.finding]


def test_without_a_torch_the_floor_is_unknown_and_said_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kiln_tool.audit import target as target_module

    monkeypatch.setattr(target_module, "candidate_lib_dirs", lambda: [])
    wheel = make_wheel(tmp_path, FILES, tag="py3-none-manylinux_2_17_x86_64.linux_x86_64", requires=("torch==9.9.0",))
    (unknown,) = [c for c in _wheel_checks(wheel) if c.finding == "floor-unknown"]
    assert unknown.detail.startswith(
        f"{wheel.name}: the platform floor (torch's own manylinux tag) is unknown: no target torch (torch==9.9.0 "
        "(from METADATA) is neither installed here (none) nor recorded in data/torch_abi")
    assert unknown.detail.endswith("; pass --torch-lib DIR); the tags manylinux_2_17_x86_64.linux_x86_64 were not "
                                   "compared with it.")
    assert unknown.fix == "audit where the target torch is installed (--torch-lib DIR) or recorded (data/torch_abi)."
    # No manylinux claim at all: nothing to compare, nothing said.
    (plain := tmp_path / "plain").mkdir()
    wheel = make_wheel(plain, FILES, tag="py3-none-linux_x86_64", requires=("torch==9.9.0",))
    assert not [c for c in _wheel_checks(wheel) if c.finding]
    # No torch at all (neither required nor linked): torch's floor does not apply, nothing unknown is said.
    (none := tmp_path / "none").mkdir()
    wheel = make_wheel(none, FILES, tag="py3-none-manylinux_2_17_x86_64")
    assert not [c for c in _wheel_checks(wheel) if c.finding]


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is needed")
def test_a_variant_for_another_cuda_is_left_out_of_the_runtimes_compared(tmp_path: Path) -> None:
    # libkilnops_cu12.so is for CUDA 12 torches and never loads beside a CUDA 13 one; libzz.so is no variant.
    cu12 = _cudart_user(tmp_path / "cu12", 12)
    cu13 = _cudart_user(tmp_path / "cu13", 13)
    options = AuditOptions(torch_version="2.14.1+cu130")
    variants = {"kilnops/libkilnops_cu12.so": cu12, "kilnops/libkilnops_cu13.so": cu13}
    (only := tmp_path / "only").mkdir()
    wheel = make_wheel(only, variants)
    assert _check(wheel, "wheel-tag", options).ok
    (beside := tmp_path / "beside").mkdir()
    wheel = make_wheel(beside, {**variants, "kilnops/libzz.so": cu12})
    assert _tag_problems(_check(wheel, "wheel-tag", options), wheel) == [
        "the binaries need libcudart.so.12, libcudart.so.13 but torch 2.14.1+cu130 ships CUDA 13"]


def test_a_version_that_is_not_pep_440_is_named(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, FILES, version="0.1.0+pt213cpu+x", requires=("torch==2.13.0",),
                       build_info={"torch_version": "2.13.0+cpu", "cuda": None, "cuda_tag": "cpu"})
    assert _tag_problems(_check(wheel, "wheel-tag"), wheel) == [
        "version '0.1.0+pt213cpu+x' in the file name is not a PEP 440 version"]


@pytest.mark.parametrize("torch_version", [None, ""])
def test_a_local_version_without_the_build_torch_cannot_be_checked(tmp_path: Path, torch_version: str | None) -> None:
    info: dict[str, object] = {"cuda": None, "cuda_tag": "cpu"}
    if torch_version is not None:
        info["torch_version"] = torch_version
    wheel = make_wheel(tmp_path, FILES, version="0.1.0+pt213cpu", build_info=info)
    assert _tag_problems(_check(wheel, "wheel-tag"), wheel) == [
        "local version '+pt213cpu' names a torch build, but the build info has no torch_version"]
    # A stable-ABI build's local version names only the CUDA variant: no torch needed to check it.
    (stable := tmp_path / "stable").mkdir()
    wheel = make_wheel(stable, FILES, version="0.1.0+cpu", build_info={**info, "abi_mode": "stable"})
    assert _check(wheel, "wheel-tag").ok


def test_tag_sets_are_shown_as_the_file_name_writes_them(tmp_path: Path, module: bytes, corpus: Corpus) -> None:
    name = "kilntest/clean.cpython-39-aarch64-linux-gnu.so"
    tag = "cp311.cp312-cp311.cp312-manylinux_2_17_x86_64.manylinux_2_28_x86_64"
    wheel = make_wheel(tmp_path, {name: module}, tag=tag, build_info={"python_tag": "cp310-cp310"})
    assert _tag_problems(_check(wheel, "wheel-tag"), wheel) == [
        f"{name} is built for cp39 but the wheel is tagged cp311.cp312-cp311.cp312",
        f"{name} is built for aarch64, the platform tag says manylinux_2_17_x86_64.manylinux_2_28_x86_64",
        "build info says cp310-cp310, the wheel is tagged cp311.cp312"]
    (abi := tmp_path / "abi").mkdir()
    abi3 = "kilntest/plain.abi3.so"
    wheel = make_wheel(abi, {abi3: corpus["libplain.so"].read_bytes()}, tag="cp311-cp311.none-manylinux_2_28_x86_64")
    assert _tag_problems(_check(wheel, "wheel-tag"), wheel) == [
        f"{abi3} is a stable-ABI (abi3) module but the ABI tag is cp311.none"]


@pytest.mark.parametrize(("torch_version", "cuda_tag", "local"), [
    ("2.14.1+cu130", "cu130", "pt214cu130"),
    ("2.13+cpu", "cpu", "pt213cpu"),  # a two-part version with a local part: the local part is not the minor
])
def test_the_local_version_names_the_build_torch_and_cuda(tmp_path: Path, torch_version: str, cuda_tag: str,
                                                          local: str) -> None:
    info = {"torch_version": torch_version, "cuda": None, "cuda_tag": cuda_tag}
    pin = ("torch==" + ".".join(torch_version.split("+")[0].split(".")[:2]) + ".*",)
    wheel = make_wheel(tmp_path, FILES, version=f"0.1.0+{local}", build_info=info, requires=pin)
    check = _check(wheel, "wheel-tag")
    assert check.ok, check.detail
    (other := tmp_path / "other").mkdir()
    wheel = make_wheel(other, FILES, version="0.1.0+pt299cpu", build_info=info, requires=pin)
    assert _tag_problems(_check(wheel, "wheel-tag"), wheel) == [
        f"local version '+pt299cpu' does not name the build's torch and CUDA ('+{local}')"]


def _torch_site(root: Path, corpus: Corpus, wheel_tag: str | None) -> Path:
    """torch 9.3.0+cpu installed under root, with its dist-info WHEEL if tagged."""
    return installed_torch(root / "lib" / "python3.11" / "site-packages", "9.3.0+cpu",
                           {"libc10.so": corpus["libplain.so"].read_bytes()}, wheel_tag)


def test_a_torch_without_platform_tags_leaves_the_floor_unknown(tmp_path: Path, corpus: Corpus) -> None:
    lib_dir = _torch_site(tmp_path / "venv", corpus, None)
    wheel = make_wheel(tmp_path, FILES, tag="py3-none-manylinux_2_28_x86_64")
    results = _wheel_checks(wheel, AuditOptions(torch_lib=lib_dir))
    (unknown,) = [c for c in results if c.finding == "floor-unknown"]
    assert unknown.detail == (f"{wheel.name}: the platform floor (torch's own manylinux tag) is unknown: torch "
                              "9.3.0+cpu's own platform tags are unknown; the tags manylinux_2_28_x86_64 were not "
                              "compared with it.")


def test_every_tag_below_the_floor_is_named_after_any_without_a_claim(tmp_path: Path, corpus: Corpus) -> None:
    lib_dir = _torch_site(tmp_path / "venv", corpus, "cp311-cp311-manylinux_2_28_x86_64")
    options = AuditOptions(torch_lib=lib_dir)
    wheel = make_wheel(tmp_path, FILES, tag="py3-none-linux_x86_64.manylinux_2_5_x86_64.manylinux_2_17_x86_64")
    results = [c for c in _wheel_checks(wheel, options) if c.id == "wheel-tag"]
    (below,) = [c for c in results if c.finding == "below-floor"]
    assert below.detail == (
        f"{wheel.name}: platform tag manylinux_2_5_x86_64 is below manylinux_2_28, the floor of torch 9.3.0+cpu's own "
        "wheel: pip would install it where torch itself cannot run; platform tag manylinux_2_17_x86_64 is below "
        "manylinux_2_28, the floor of torch 9.3.0+cpu's own wheel: pip would install it where torch itself cannot "
        "run.")
    # The wheel's own problems come first, then the floor.
    (bad := tmp_path / "bad").mkdir()
    wheel = make_wheel(bad, FILES, tag="py3-none-manylinux_2_17_x86_64", build_info={"python_tag": "cp310-cp310"})
    assert [c.finding for c in _wheel_checks(wheel, options) if c.id == "wheel-tag"] == ["", "below-floor"]


def test_every_tag_without_a_manylinux_claim_is_noted(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, FILES, tag="py3-none-linux_x86_64.linux_i686")
    assert _check(wheel, "wheel-tag").detail == (
        "tags and binaries agree; not checked: local version and CUDA"
        " variant against the build (the wheel has no kiln build info) (no torch is required or linked: torch's "
        "platform floor does not apply; platform tag linux_x86_64 makes no manylinux claim (`kiln repair` assigns "
        "one); platform tag linux_i686 makes no manylinux claim (`kiln repair` assigns one))")
