"""Rules on the C++/CUDA sources that keep the build reproducible and the kernels reusable."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from support.op_layout import op_names, violations

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


def test_an_op_is_its_folder() -> None:
    # An op's own code lives in ops/<op>/, what ops share in ops/common/ (and ops/facade/), and
    # nothing else lists the ops (tests/support/op_layout.py). Every violation, path:line, in full.
    names = op_names(REPO)
    assert {"weighted_sum", "rms_norm", "nms", "roi_align"} <= set(names.values())
    found = violations(REPO)
    if found:
        pytest.fail(f"{len(found)} place(s) where an op's code is not in its folder:\n" + "\n".join(map(str, found)),
                    pytrace=False)
