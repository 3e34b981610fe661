"""The target torch follows what a library needs: one that needs libtorch_cuda.so is audited against a CUDA
build of the torch the wheel pins (recorded, when only a CPU build is installed here), never told that an
installed CPU torch lacks its CUDA libraries; a CPU-only library keeps the installed torch."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from audit_corpus import HARDENED, make_wheel

from kiln_tool.audit import audit_paths
from kiln_tool.audit import target as target_module
from kiln_tool.audit.torch_abi import load_recorded

TORCH_LIB = Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages" \
    / "torch" / "lib"


def _lib(tmp: Path, name: str, source: str, *flags: str) -> bytes:
    (tmp / f"{name}.c").write_text(source)
    subprocess.run(["gcc", "-shared", "-o", str(tmp / name), f"{name}.c", *HARDENED, *flags], check=True,
                   capture_output=True, cwd=tmp)
    return (tmp / name).read_bytes()


@pytest.mark.parametrize("needs_cuda", [True, False])
def test_target_torch_follows_what_the_library_needs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     needs_cuda: bool) -> None:
    installed = target_module.torch_version_at(TORCH_LIB) if (TORCH_LIB / "libc10.so").is_file() else None
    if shutil.which("gcc") is None or installed is None or (TORCH_LIB / "libtorch_cuda.so").exists():
        pytest.skip("needs gcc and a CPU build of torch in this interpreter")
    public = installed.split("+")[0]
    if load_recorded(f"{public}+cu130") is None:
        pytest.skip(f"no CUDA build of torch {public} recorded in data/torch_abi")
    monkeypatch.setattr(target_module, "candidate_lib_dirs", lambda: [TORCH_LIB.resolve()])
    # Only linked against: the audit must find torch's own libtorch_cuda.so.
    _lib(tmp_path, "libtorch_cuda.so", "int kiln_stub(void) { return 0; }\n", "-Wl,-soname,libtorch_cuda.so")
    links = ["-L" + str(tmp_path), "-Wl,--no-as-needed", "-ltorch_cuda"] if needs_cuda else []
    ext = _lib(tmp_path, "libkilncuda.so", "int kiln_cuda_op(int x) { return x; }\n", *links,
               "-Wl,-rpath,$ORIGIN/../torch/lib")
    wheel = make_wheel(tmp_path, {"kilntest/libkilncuda.so": ext}, requires=(f"torch=={public}",))
    (artifact,) = audit_paths([wheel]).artifacts
    (lib,) = artifact.libraries
    undefined = [c for c in lib.checks if c.id == "undefined-symbols"]
    if needs_cuda:
        assert f"{public}+cu130 as recorded in" in str(artifact.target["torch"])
        assert "needs libtorch_cuda.so" in str(artifact.target["torch"])
        assert all(c.ok for c in undefined), [c.detail for c in undefined]
        assert "libtorch_cuda.so from torch/lib/libtorch_cuda.so (recorded)" in undefined[0].detail
    else:
        assert str(artifact.target["torch"]).startswith(f"{installed} at {TORCH_LIB.resolve()}")
        assert all(c.ok for c in undefined)
