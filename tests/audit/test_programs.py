"""Every ELF member of a wheel is audited by its kind: a program (bin/tool, found by its bytes, not its name) is
checked as a program (its RUNPATH must reach what it needs, since nothing loads a library for it first; no export
or registration rules), and byte-identical copies are audited once beyond numeric suffixes (auditwheel's
libx-<hash>.so.1 beside libx.so.1). Built from small sources with gcc."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from audit_corpus import make_wheel

from kiln_tool.audit import audit_paths
from kiln_tool.audit.report import ArtifactReport

LIB = '__attribute__((visibility("default"))) int kiln_tool_f(int x) { return x + 1; }\n'
MAIN = "int kiln_tool_f(int);\nint main(int argc, char **argv) { (void)argv; return kiln_tool_f(argc) == 0; }\n"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed")
    tmp = tmp_path_factory.mktemp("programs")
    (tmp / "lib.c").write_text(LIB)
    (tmp / "main.c").write_text(MAIN)
    common = ["-O1", "-Wl,-z,noexecstack", "-Wl,--enable-new-dtags"]
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", "libktool.so", "lib.c", "-Wl,-soname,libktool.so", *common],
                   check=True, cwd=tmp, capture_output=True)
    out = {"libktool.so": (tmp / "libktool.so").read_bytes()}
    for name, runpath in (("reaches", "$ORIGIN/../lib"), ("lost", "$ORIGIN/../nowhere")):
        subprocess.run(["gcc", "-o", name, "main.c", "-L.", "-lktool", f"-Wl,-rpath,{runpath}", *common], check=True,
                       cwd=tmp, capture_output=True)
        out[name] = (tmp / name).read_bytes()
    subprocess.run(["gcc", "-static", "-o", "static", "main.c", "lib.c", "-O1"], check=False, cwd=tmp,
                   capture_output=True)
    if (tmp / "static").is_file():
        out["static"] = (tmp / "static").read_bytes()
    return out


def _audit(tmp: Path, files: dict[str, bytes]) -> ArtifactReport:
    # Tagged for this host's glibc: a program's own __libc_start_main@GLIBC_2.34 is no finding here.
    (artifact,) = audit_paths([make_wheel(tmp, files, tag="cp311-cp311-manylinux_2_36_x86_64")]).artifacts
    return artifact


def test_a_program_whose_runpath_cannot_reach_its_library_can_never_start(built: dict[str, bytes],
                                                                          tmp_path: Path) -> None:
    artifact = _audit(tmp_path, {"kilntest/lib/libktool.so": built["libktool.so"], "kilntest/bin/tool": built["lost"],
                                 "kilntest/data/notes.txt": b"\x7fELF but a text file" * 8})
    assert {lib.path for lib in artifact.libraries} == {"kilntest/lib/libktool.so", "kilntest/bin/tool"}
    (tool,) = [lib for lib in artifact.libraries if lib.path == "kilntest/bin/tool"]
    checks = {c.id: c for c in tool.checks}
    assert "executable" in checks["elf-valid"].detail
    assert "exports" not in checks and "registration" not in checks  # a program's exports bind nothing
    failures = [c for c in tool.checks if not c.ok]
    assert [(c.id, c.severity) for c in failures] == [("undefined-symbols", "error")], failures
    assert "needed libraries not found in the installed layout: libktool.so" in failures[0].detail
    assert not artifact.ok


def test_a_program_whose_runpath_reaches_its_library_passes(built: dict[str, bytes], tmp_path: Path) -> None:
    files = {"kilntest/lib/libktool.so": built["libktool.so"], "kilntest/bin/tool": built["reaches"]}
    if "static" in built:
        files["kilntest/bin/static-tool"] = built["static"]
    artifact = _audit(tmp_path, files)
    (tool,) = [lib for lib in artifact.libraries if lib.path == "kilntest/bin/tool"]
    assert all(c.ok for c in tool.checks), tool.checks
    assert any(c.id == "undefined-symbols" and "libktool.so from kilntest/lib/libktool.so" in c.detail
               for c in tool.checks)
    if "static" in built:
        (static,) = [lib for lib in artifact.libraries if lib.path == "kilntest/bin/static-tool"]
        assert [c.detail for c in static.checks] == ["kilntest/bin/static-tool: a statically linked program: no "
                                                     "libraries to load, nothing to resolve"]


def test_byte_identical_copies_are_recognised_beyond_numeric_suffixes(built: dict[str, bytes],
                                                                      tmp_path: Path) -> None:
    lib = built["libktool.so"]
    artifact = _audit(tmp_path, {"kilntest.libs/libktool-1a2b3c4d.so": lib, "kilntest.libs/libktool.so": lib,
                                 "kilntest/libktool.so": lib, "kilntest.libs/libother.so": lib})
    by_path = {report.path: report for report in artifact.libraries}
    # The grafted name is the longer: the copy without the hash is folded into it. Another folder's copy
    # (another $ORIGIN) and a copy under another name are audited on their own.
    assert by_path["kilntest.libs/libktool-1a2b3c4d.so"].copies == ["kilntest.libs/libktool.so"]
    assert set(by_path) == {"kilntest.libs/libktool-1a2b3c4d.so", "kilntest/libktool.so", "kilntest.libs/libother.so"}
