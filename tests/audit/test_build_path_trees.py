"""build-paths: a path is blamed by the tree it lies in, not by its root. A header of an include tree is a
dependency's (a fetched LLVM, a package cache under a home directory, CMake's _deps) unless the project's own
sources sit beside that tree; a path under a dependency cache is never the project's. Built with gcc from a source
that embeds such paths as strings (as __FILE__ in a header's macro does)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from audit_corpus import make_wheel

from kiln_tool.audit import audit_paths
from kiln_tool.audit.policy import load_policy

OWN = ["/root/proj/src/ops.cpp", "/root/proj/include/proj/ops.h"]
DEPENDENCY = ["/root/.cache/cpm/fmt/include/fmt/core.h", "/root/llvm-project/llvm/include/llvm/ADT/SmallVector.h",
              "/root/proj/build/_deps/json-src/include/nlohmann/json.hpp", "/home/ci/.conan2/p/zlib/include/zlib.h"]


@pytest.mark.parametrize(("path", "kind"), [
    ("/root/.cache/cpm/fmt/include/fmt/core.h", "toolchain"),
    ("/root/llvm-project/llvm/include/llvm/ADT/SmallVector.h", "toolchain"),
    ("/root/proj/build/_deps/json-src/include/nlohmann/json.hpp", "toolchain"),
    ("/root/proj/build/_deps/json-src/src/json.cpp", "toolchain"),
    ("/root/proj/src/ops.cpp", "source"),
    ("/root/proj/build/ops.cpp.o", "source"),
    ("/root/proj/include/proj/ops.cpp", "source"),  # a source file in an include folder is still compiled code
])
def test_the_tree_outranks_the_root(path: str, kind: str) -> None:
    assert load_policy("manylinux_2_28").build_paths.classify(path) == kind


def test_headers_are_the_projects_only_beside_its_sources(tmp_path: Path) -> None:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed")
    strings = "".join(f'__attribute__((visibility("default"))) const char *kiln_path{i} = "{p}";\n'
                      for i, p in enumerate(OWN + DEPENDENCY))
    (tmp_path / "paths.c").write_text(strings)
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-Wl,-z,noexecstack", "-o", "libpaths.so", "paths.c"],
                   check=True, cwd=tmp_path, capture_output=True)
    wheel = make_wheel(tmp_path, {"kilntest/libpaths.so": (tmp_path / "libpaths.so").read_bytes()})
    (artifact,) = audit_paths([wheel]).artifacts
    results = {c.finding: " ".join(c.detail.split()) for c in artifact.libraries[0].checks
               if c.id == "build-paths" and not c.ok}
    assert set(results) == {"", "toolchain"}, results
    for path in OWN:
        assert path in results[""] and path not in results["toolchain"], path
    for path in DEPENDENCY:
        assert path in results["toolchain"] and path not in results[""], path
