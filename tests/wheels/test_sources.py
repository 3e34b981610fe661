"""Rules on the C++/CUDA sources that keep the build reproducible and the kernels reusable."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_no_anonymous_namespaces_in_cuda_sources() -> None:
    # nvcc names anonymous namespaces after a hash of the absolute source path, so the
    # fatbin of a build in another directory differs: use a named internal namespace.
    offenders = [str(p.relative_to(REPO)) for p in sorted((REPO / "ops").rglob("*.cu"))
                 if re.search(r"\bnamespace\s*\{", p.read_text())]
    assert offenders == []


def test_kernel_cores_include_no_torch_header() -> None:
    # Only the facade (ops/facade/: one implementation over ATen, one over the stable ABI) sees
    # torch. Kernel cores and ops/common/ see raw pointers; each op's binding.cpp, compiled in
    # both ABI modes, sees the facade only.
    pattern = re.compile(r'#\s*include\s*[<"](torch|ATen|c10)/')
    offenders = [str(p.relative_to(REPO)) for p in sorted((REPO / "ops").rglob("*"))
                 if p.is_file() and p.relative_to(REPO / "ops").parts[0] != "facade"
                 and pattern.search(p.read_text())]
    assert offenders == []


def test_op_bindings_use_the_facade_only() -> None:
    # One binding source per op for both ABI modes: no mode-specific code paths in it.
    for binding in sorted((REPO / "ops").glob("*/binding.cpp")):
        text = binding.read_text()
        assert '#include "facade/facade.h"' in text, binding
        assert not re.search(r"OPKILN_STABLE_ABI|TORCH_LIBRARY|STABLE_TORCH|\bat::|torch::|c10::", text), binding


def test_each_op_is_named_in_at_most_six_files() -> None:
    # An op is one folder: its name appears in its folder, the Python wrapper and little else
    # (tests, benchmarks and docs apart). The count is
    #   git grep -l -w NAME -- . ':!tests' ':!benchmarks' ':!docs' | wc -l
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    names: set[str] = set()
    for binding in (REPO / "ops").glob("*/binding.cpp"):
        names.add(binding.parent.name)
        names.update(re.findall(r'\bm\.def\(\s*"([A-Za-z_][A-Za-z0-9_]*)', binding.read_text()))
    assert {"weighted_sum", "rms_norm", "nms", "roi_align"} <= names
    counts = {}
    for name in sorted(names):
        out = subprocess.run(["git", "grep", "-l", "-w", name, "--", ".", ":!tests", ":!benchmarks", ":!docs"],
                             cwd=REPO, capture_output=True, text=True, check=False)
        counts[name] = out.stdout.split()
    assert {n: f for n, f in counts.items() if len(f) > 6} == {}
