"""Issue 43, class 3: the installed ``_build_info.json`` is untrusted input at import time. A type-confused,
oversized or hostile one is the guard's one ImportError naming the file and the fix (reinstall), from the guard
and from the doctor alike: never a raw TypeError, never parsed when it is huge, never a control character in a
message. Build infos are generated with hypothesis from the valid one, each field replaced by a wrong type."""

from __future__ import annotations

import contextlib
import json
import shlex
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from guard.guard_pkg import GuardedPackage, environment_info, make_package

FIELDS = ["project", "package", "namespace", "libraries", "index_url", "version", "abi_mode", "torch_version",
          "torch_major_minor", "torch_min", "cuda", "cuda_tag", "cuda_archs", "cxx11_abi", "python_tag",
          "extension_suffix", "ops", "targets", "flags", "schema"]
# What each field may not hold (a value of another JSON type, or text the field's form refuses).
WRONG: dict[str, Any] = {
    "ops": st.one_of(st.integers(), st.none(), st.text(), st.lists(st.integers(), min_size=1),
                     st.just(["ns\n::axpy"]), st.just(["not an op"]), st.just([{"a": 1}])),
    "targets": st.one_of(st.integers(), st.text(), st.just(["../../etc/x=python-module"]), st.just([5])),
    "cuda_archs": st.one_of(st.integers(), st.none(), st.just([1, 2]), st.text()),
    "cxx11_abi": st.one_of(st.text(), st.lists(st.booleans()), st.just({})),
    "flags": st.one_of(st.integers(), st.lists(st.text()), st.just({"cxx": "-O3"})),
    "schema": st.one_of(st.text(), st.none(), st.booleans(), st.floats()),
    "index_url": st.one_of(st.integers(), st.just("https://x/$(id)\n"), st.just("ftp://x"), st.just("not a url"),
                           st.lists(st.text())),
    "project": st.one_of(st.integers(), st.just("ringops; rm -rf ~"), st.just("a b"), st.just("-e")),
    "version": st.one_of(st.integers(), st.just("0.3.0\n"), st.just("1.0 && id")),
}
DEFAULT_WRONG = st.one_of(st.integers(), st.lists(st.text(max_size=3), min_size=1), st.dictionaries(
    st.text(max_size=3), st.integers(), min_size=1), st.just("text\x1b[31mforged"), st.just("x" * 5000))


@st.composite
def broken_infos(draw: st.DrawFn) -> dict[str, Any]:
    info = environment_info(targets=["pkg/_C=python-module"], ops=["ns::axpy"])
    for field in draw(st.lists(st.sampled_from(FIELDS), min_size=1, max_size=3, unique=True)):
        info[field] = draw(WRONG.get(field, DEFAULT_WRONG))
    return info


@pytest.fixture(scope="module")
def pkg(tmp_path_factory: pytest.TempPathFactory) -> GuardedPackage:
    return make_package(tmp_path_factory.mktemp("site"), environment_info(), dist="guarded-dist")


def _assert_one_message(pkg: GuardedPackage, exc: BaseException) -> None:
    buildinfo = pkg.module("buildinfo")
    assert isinstance(exc, buildinfo.BuildInfoMissing) and isinstance(exc, ImportError)
    text = str(exc)
    assert text.startswith(f"{pkg.build_info_file}: ") and text.isprintable() and len(text) < 2000, text
    fix = text.rsplit(": ", 1)[1]
    assert shlex.split(fix) == ["pip", "install", "--force-reinstall", "--no-deps", "guarded-dist"]


def _refused(pkg: GuardedPackage, info: Any) -> BaseException | None:
    pkg.write_info(info)
    try:
        pkg.module("loader").load_libraries()
    except Exception as exc:
        return exc
    return None


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(broken_infos())
def test_a_type_confused_build_info_is_one_message(pkg: GuardedPackage, info: dict[str, Any]) -> None:
    """Every generated build info with a wrong field: the guard raises its one message, never TypeError."""
    exc = _refused(pkg, info)
    assert exc is not None
    _assert_one_message(pkg, exc)


@pytest.mark.parametrize("raw", [b"[]", b"5", b"null", b'"x"', b"{", b"\xff\xfe", b"[" * 100_000,
                                 json.dumps({"ops": 5}).encode(), json.dumps({"ops": None}).encode(),
                                 json.dumps({"cuda_archs": "9.0"}).encode()])
def test_documents_that_are_not_a_build_info(pkg: GuardedPackage, raw: bytes) -> None:
    exc = _refused(pkg, raw)
    assert exc is not None
    _assert_one_message(pkg, exc)


def test_a_huge_build_info_is_refused_unread(pkg: GuardedPackage) -> None:
    """200 MB of valid JSON would be parsed on every import; the guard refuses it after reading 1 MiB + 1."""
    info = environment_info(padding="x" * 10)
    text = json.dumps(info)
    big = text[:-1] + ', "more": "' + "y" * (2 * 1024 * 1024) + '"}'
    exc = _refused(pkg, big.encode())
    assert exc is not None and "larger than 1048576 bytes" in str(exc)
    _assert_one_message(pkg, exc)


def _release_reader(fifo: Path) -> None:
    """Give a reader blocked on ``fifo`` its end of file (the guard before issue 43 blocked there for ever)."""
    import os

    with contextlib.suppress(OSError):  # no reader waiting: nothing to release
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


def test_a_fifo_build_info_does_not_hang(pkg: GuardedPackage, tmp_path: Path) -> None:
    import os

    pkg.build_info_file.unlink()
    os.mkfifo(pkg.build_info_file)
    release = threading.Timer(10.0, _release_reader, [pkg.build_info_file])
    release.start()
    try:
        pkg.forget()
        with pytest.raises(ImportError, match="is not a regular file") as raised:
            pkg.module("buildinfo").build_info()
        _assert_one_message(pkg, raised.value)
    finally:
        release.cancel()
        pkg.build_info_file.unlink()
        pkg.write_info(environment_info())


def test_the_valid_build_info_still_loads(pkg: GuardedPackage) -> None:
    pkg.write_info(environment_info(ops=["aten::add.Tensor"], targets=None))
    assert pkg.module("buildinfo").build_info()["ops"] == ["aten::add.Tensor"]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(broken_infos())
def test_the_doctor_reports_it_and_does_not_crash(pkg: GuardedPackage, info: dict[str, Any]) -> None:
    pkg.write_info(info)
    report = pkg.module("doctor").collect(None, environ={})
    check = next(c for c in report["checks"] if c["name"] == "build info")
    assert check["status"] == "fail" and report["verdict"] == "fail"
    assert shlex.split(check["fix"]) == ["pip", "install", "--force-reinstall", "--no-deps", "guarded-dist"]
    assert str(pkg.build_info_file) in check["detail"][0]
    json.dumps(report, default=str)
