"""kiln torch-runtime: the runtime wheels the extension links, with the pins of torch's own METADATA."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln_tool.torch_runtime import TorchRuntimeError, installed_link_requirements, link_requirements

REPO_KILN = [sys.executable, "scripts/kiln"]

# torch 2.14.1 (CUDA 13.0, manylinux_2_28_x86_64): its Requires-Dist as published.
TORCH_2_14_1_CU130 = [
    "filelock", "typing-extensions>=4.10.0", "setuptools>=77.0.3", "sympy>=1.13.3", "networkx>=2.5.1", "jinja2",
    "fsspec>=0.8.5",
    'cuda-toolkit[cublas,cudart,cufft,cufile,cupti,curand,cusolver,cusparse,nvjitlink,nvrtc,nvtx]==13.0.3; '
    'platform_system == "Linux"',
    'cuda-bindings<14,>=13.0.3; platform_system == "Linux" and python_version < "3.15"',
    'nvidia-cudnn-cu13==9.24.0.43; platform_system == "Linux"',
    'nvidia-nccl-cu13==2.30.7; platform_system == "Linux"',
    'triton~=3.8.0; platform_system == "Linux" and python_version < "3.15"',
    'optree>=0.13.0; extra == "optree"',
]
# The CUDA 12 layout (torch 2.x cu126): one wheel per library, pinned exactly.
TORCH_CU126 = [
    "filelock",
    'nvidia-cuda-nvrtc-cu12==12.6.77; platform_system == "Linux" and platform_machine == "x86_64"',
    'nvidia-cuda-runtime-cu12==12.6.77; platform_system == "Linux" and platform_machine == "x86_64"',
    'nvidia-cublas-cu12==12.6.4.1; platform_system == "Linux" and platform_machine == "x86_64"',
]
LINUX = {"platform_system": "Linux", "platform_machine": "x86_64", "python_version": "3.11"}


def test_cuda13_torch_pins_the_toolkit_metapackage_narrowed_to_cudart() -> None:
    (req,) = link_requirements(TORCH_2_14_1_CU130, cuda=True, environment=LINUX)
    assert req.library == "cudart"
    assert req.requirement == "cuda-toolkit[cudart]==13.0.3"
    assert req.source.startswith("cuda-toolkit[cublas,cudart")


def test_cuda12_torch_pins_the_runtime_wheel_itself() -> None:
    (req,) = link_requirements(TORCH_CU126, cuda=True, environment=LINUX)
    assert req.requirement == "nvidia-cuda-runtime-cu12==12.6.77"


def test_a_cpu_torch_needs_no_runtime_wheel() -> None:
    assert link_requirements(["filelock", "sympy>=1.13.3"], cuda=False, environment=LINUX) == []


def test_markers_that_do_not_hold_here_are_not_used() -> None:
    with pytest.raises(TorchRuntimeError, match="provides cudart"):
        link_requirements(TORCH_2_14_1_CU130, cuda=True, environment={**LINUX, "platform_system": "Windows"})


def test_a_cuda_torch_that_names_no_provider_is_an_error() -> None:
    with pytest.raises(TorchRuntimeError, match=r"cuda-toolkit\[cudart\].*data/torch_runtime.json"):
        link_requirements(["filelock", "nvidia-cudnn-cu13==9.24.0.43"], cuda=True, environment=LINUX)


@settings(max_examples=40, derandomize=True, deadline=None)
@given(extras=st.lists(st.sampled_from(["cublas", "cufft", "nvrtc", "nvtx", "curand", "cusolver"]), unique=True),
       where=st.integers(min_value=0, max_value=10),
       version=st.from_regex(r"13\.[0-9]\.[0-9]{1,2}", fullmatch=True))
def test_the_pin_is_always_torchs_own(extras: list[str], where: int, version: str) -> None:
    """Whatever else torch's metapackage line asks for, and wherever it stands, the kept requirement is that
    line's version with the cudart extra alone."""
    extras_with = sorted({*extras, "cudart"})
    line = f"cuda-toolkit[{','.join(extras_with)}]=={version}; platform_system == \"Linux\""
    requires = [r for r in TORCH_2_14_1_CU130 if not r.startswith("cuda-toolkit")]
    requires.insert(min(where, len(requires)), line)
    (req,) = link_requirements(requires, cuda=True, environment=LINUX)
    assert req.requirement == f"cuda-toolkit[cudart]=={version}"


def test_kiln_torch_runtime_on_the_cpu_dev_torch() -> None:
    result = subprocess.run([*REPO_KILN, "torch-runtime"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert "CPU kernels (a CPU torch or KILN_VARIANT=cpu) link none of its runtime wheels" in result.stderr


def test_cpu_kernels_against_a_cuda_torch_link_no_runtime_wheel(tmp_path: Path) -> None:
    """KILN_VARIANT=cpu builds CPU kernels against any torch: nothing of CUDA is linked or installed."""
    site = tmp_path / "site"
    info = site / "torch-2.14.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.14.1+cu130\n"
                                   + "".join(f"Requires-Dist: {line}\n" for line in TORCH_2_14_1_CU130))
    (info / "RECORD").write_text("")
    version, cuda = installed_link_requirements([str(site)], variant="auto")
    assert version == "2.14.1+cu130"
    assert [r.requirement for r in cuda] == ["cuda-toolkit[cudart]==13.0.3"]
    assert installed_link_requirements([str(site)], variant="cpu") == ("2.14.1+cu130", [])
