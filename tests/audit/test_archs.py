"""TORCH_CUDA_ARCH_LIST semantics and --gpu: what a request demands and what a GPU can run."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kiln_tool.audit.archs import (
    CudaArch,
    gpu_runs,
    parse_arch_list,
    parse_gpu,
    ptx_runs_on,
    sass_runs_on,
    why_not_covering,
)
from kiln_tool.audit.errors import AuditInputError
from kiln_tool.audit.fatbin import ArchManifest

A = CudaArch


def test_ptx_only_where_plus_ptx_is_asked() -> None:
    assert parse_arch_list("9.0a", "t").ptx == ()
    assert parse_arch_list("8.0;9.0;12.0", "t").ptx == ()  # the newest gets no PTX without +PTX
    request = parse_arch_list("7.5;8.0+PTX;12.0+PTX", "t")
    assert request.ptx == (A(8, 0), A(12, 0))
    assert request.sass == (A(7, 5), A(8, 0), A(12, 0))


def test_plus_ptx_on_arch_specific_targets_is_never_demanded() -> None:
    request = parse_arch_list("9.0a+PTX;10.0f+PTX", "t")
    assert request.ptx == ()
    assert request.ignored_ptx == (A(9, 0, "a"), A(10, 0, "f"))
    assert "+PTX ignored on 9.0a, 10.0f" in request.describe()


@pytest.mark.parametrize("bad", ["9", "sm_90", "9.0b", "9.0+ptx", ""])
def test_bad_arch_items(bad: str) -> None:
    with pytest.raises(AuditInputError):
        parse_arch_list(bad, "t")


def test_why_a_ptx_does_not_cover() -> None:
    assert "arch-specific" in why_not_covering(A(9, 0, "a"), A(9, 0))
    assert "family-specific" in why_not_covering(A(10, 0, "f"), A(10, 0))
    assert "newer" in why_not_covering(A(12, 0), A(9, 0))
    assert "older" in why_not_covering(A(8, 0), A(12, 0))


def test_gpu_runs_examples() -> None:
    ours = ArchManifest(sass=(A(7, 5), A(8, 0), A(8, 6), A(9, 0), A(10, 0), A(12, 0)), ptx=(A(12, 0),))
    assert gpu_runs(ours, A(8, 9)) == (True, "SASS sm_86 (binary compatible: same major 8, 8.6 <= 8.9)")
    assert gpu_runs(ours, A(9, 0))[1] == "SASS sm_90 (for it)"
    runs, how = gpu_runs(ours, A(13, 0))
    assert runs and "JITs PTX compute_120" in how
    hopper_only = ArchManifest(sass=(A(9, 0, "a"),), ptx=(A(9, 0, "a"),))
    runs, how = gpu_runs(hopper_only, A(10, 0))
    assert not runs and "sm_90a is arch-specific to 9.0" in how and "compute_90a is arch-specific" in how
    assert gpu_runs(hopper_only, A(9, 0))[0]
    assert parse_gpu("sm_120") == A(12, 0) and parse_gpu("8.6") == A(8, 6)
    with pytest.raises(AuditInputError):
        parse_gpu("ampere")


archs = st.builds(A, st.integers(5, 13), st.integers(0, 9), st.sampled_from(["", "a", "f"]))
gpus = st.builds(A, st.integers(5, 13), st.integers(0, 9))


@given(archs, gpus)
def test_device_code_compatibility_rules(code: CudaArch, gpu: CudaArch) -> None:
    # Never an 'a' target of another arch, never code newer than the GPU, never SASS of another major.
    if sass_runs_on(code, gpu):
        assert code.major == gpu.major and code.minor <= gpu.minor
        assert code.variant != "a" or code.minor == gpu.minor
    if ptx_runs_on(code, gpu):
        assert code.number <= gpu.number
        assert code.variant != "a" or (code.major, code.minor) == (gpu.major, gpu.minor)
        assert code.variant != "f" or code.major == gpu.major
    # Plain code at the GPU's own arch always runs.
    own = A(gpu.major, gpu.minor)
    assert sass_runs_on(own, gpu) and ptx_runs_on(own, gpu)


@given(st.lists(archs, max_size=4), st.lists(archs, max_size=3), gpus)
def test_gpu_runs_agrees_with_the_rules(sass: list[CudaArch], ptx: list[CudaArch], gpu: CudaArch) -> None:
    runs, how = gpu_runs(ArchManifest(tuple(sass), tuple(ptx)), gpu)
    assert runs == (any(sass_runs_on(a, gpu) for a in sass) or any(ptx_runs_on(a, gpu) for a in ptx))
    assert how
