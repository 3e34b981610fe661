"""build-paths reads DWARF: the project's tree named only by DW_AT_comp_dir plus a relative DW_AT_name is
found; sources of the toolchain's own prebuilt objects (/builddir/build/BUILD/gcc-*, where gcc-toolset's RPMs
are built) are not blamed on the project. Built from tiny sources with the real compiler."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from audit_corpus import HARDENED
from hypothesis import given
from hypothesis import strategies as st

from kiln_tool.audit import audit_paths
from kiln_tool.audit.policy import load_policy

PREBUILT = "/builddir/build/BUILD/gcc-12.2.1-20221121/obj-x86_64-redhat-linux/x86_64-redhat-linux/libstdc++-v3/" \
    "include/bits/basic_string.h"


def _build(tmp: Path, name: str, source: str, *flags: str) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed")
    (tmp / "ops").mkdir(exist_ok=True)
    (tmp / "ops" / "kernel.c").write_text(source)
    subprocess.run(["gcc", "-shared", "-o", str(tmp / name), "ops/kernel.c", *HARDENED, *flags], check=True,
                   capture_output=True, cwd=tmp)
    return tmp / name


def _build_paths(path: Path) -> list[tuple[bool, str, str]]:
    (lib,) = audit_paths([path]).artifacts[0].libraries
    return [(c.ok, c.finding, c.detail) for c in lib.checks if c.id == "build-paths"]


def test_project_tree_named_only_by_dwarf(tmp_path: Path) -> None:
    # The compile directory mapped to /srv/kilnproj: no string holds /srv/kilnproj/ops/kernel.c, and
    # /srv/kilnproj alone is no build tree.
    lib = _build(tmp_path, "libdwarf.so", "int kiln_f(int x) { return x + 1; }\n", "-g",
                 f"-fdebug-prefix-map={tmp_path}=/srv/kilnproj")
    assert b"/srv/kilnproj/ops/kernel.c" not in lib.read_bytes()
    ((ok, finding, detail),) = _build_paths(lib)
    assert not ok and finding == ""
    assert "'/srv/kilnproj/ops/kernel.c' in .debug_info (DW_AT_comp_dir + DW_AT_name)" in detail
    stripped = tmp_path / "libstripped.so"
    subprocess.run(["strip", "--strip-debug", "-o", str(stripped), str(lib)], check=True)
    assert _build_paths(stripped) == [(True, "", "no build-machine paths")]


def test_toolchain_prebuilt_sources_are_not_the_projects(tmp_path: Path) -> None:
    # What a static libstdc++_nonshared.a object brings: its __FILE__ under the RPM build root.
    lib = _build(tmp_path, "libprebuilt.so", f'#line 1 "{PREBUILT}"\n'
                 '__attribute__((visibility("default"))) const char *kiln_where(void) { return __FILE__; }\n')
    assert PREBUILT.encode() in lib.read_bytes()
    ((ok, _finding, detail),) = _build_paths(lib)
    assert ok, detail
    assert "1 path(s) of the toolchain's own prebuilt objects" in detail


@given(st.lists(st.from_regex(r"[a-z0-9_.+-]{1,12}", fullmatch=True), min_size=1, max_size=5))
def test_prebuilt_prefix_wins(parts: list[str]) -> None:
    rule = load_policy("manylinux_2_28").build_paths
    path = "/builddir/build/BUILD/" + "/".join(parts) + "/x.cc"
    assert rule.classify(path) == "prebuilt"
    assert rule.classify("/home/builder/" + "/".join(parts) + "/x.cc") in ("source", "toolchain")
