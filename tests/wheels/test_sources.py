"""Rules on the C++/CUDA sources that keep the build reproducible and the kernels reusable."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_no_anonymous_namespaces_in_cuda_sources() -> None:
    # nvcc names anonymous namespaces after a hash of the absolute source path, so the
    # fatbin of a build in another directory differs: use a named internal namespace.
    offenders = [str(p.relative_to(REPO)) for p in sorted((REPO / "ops").rglob("*.cu"))
                 if re.search(r"\bnamespace\s*\{", p.read_text())]
    assert offenders == []


def test_kernel_cores_include_no_torch_header() -> None:
    # Everything under ops/ but the bindings is shared by both ABI modes: kernel cores and
    # ops/common/ see raw pointers only.
    pattern = re.compile(r'#\s*include\s*[<"](torch|ATen|c10)/')
    bindings = {"torch", "stable", "facade"}
    offenders = [str(p.relative_to(REPO)) for p in sorted((REPO / "ops").rglob("*"))
                 if p.is_file() and p.relative_to(REPO / "ops").parts[0] not in bindings
                 and pattern.search(p.read_text())]
    assert offenders == []
