"""`import opkiln` in real mismatched environments: one clear error with the exact fix, never a raw loader error.

Every scenario runs `python -c "import opkiln"` in a subprocess of a real venv
(see conftest.py for how the venvs are made: a real torch via a .pth file, the
real wheel installed with pip --no-deps).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from preflight.preflight_support import assert_clean_failure, install_command

pytestmark = pytest.mark.slow

IMPORT_AND_RUN = (
    "import torch, opkiln; "
    "print('RESULT', opkiln.weighted_sum(torch.ones(4), torch.zeros(4), 0.25).tolist())"
)
CATCH = (
    "import json, sys\n"
    "try:\n"
    "    import opkiln\n"
    "except ImportError as exc:\n"
    "    cls = sys.modules['opkiln._kiln.preflight'].error_class()\n"
    "    print(json.dumps({'type': type(exc).__name__, 'is_env_error': isinstance(exc, cls),\n"
    "                      'problems': exc.problems, 'fix': exc.fix, 'loader_error': exc.loader_error}))\n"
)


def test_matching_wheel_imports_and_runs(good_venv):
    proc = good_venv.run("-c", IMPORT_AND_RUN)
    assert proc.returncode == 0, proc.stderr
    assert "RESULT [0.25, 0.25, 0.25, 0.25]" in proc.stdout


def test_cuda_torch214_wheel_on_cpu_torch213(make_venv, torch213_site, cuda_wheel):
    venv = make_venv("cuda214-wheel-on-torch2.13-cpu", torch213_site, cuda_wheel)
    out = assert_clean_failure(venv.run("-c", "import opkiln"))
    assert "OpkilnEnvironmentError: opkiln cannot be imported" in out
    assert "built for: torch 2.14.x (built with 2.14.1+cu130), CUDA 13.0 kernels (cu130)" in out
    assert "installed: torch 2.13.0+cpu, CPU-only build (cpu)" in out
    assert "compiled against torch 2.14" in out
    assert "CPU-only build" in out and "libc10_cuda" in out
    assert install_command("cpu", "2.13") in out
    assert "python -m opkiln doctor" in out and "OPKILN_SKIP_PREFLIGHT=1" in out and "OPKILN_INDEX_URL" in out


def test_index_url_override(make_venv, torch213_site, cuda_wheel):
    venv = make_venv("cuda214-wheel-on-torch2.13-cpu", torch213_site, cuda_wheel)
    proc = venv.run("-c", "import opkiln", env={"OPKILN_INDEX_URL": "https://mirror.example.org/opkiln/"})
    out = assert_clean_failure(proc)
    assert install_command("cpu", "2.13", "https://mirror.example.org/opkiln") in out


def test_torch213_wheel_on_cuda_torch214(make_venv, torch214_site, cpu_wheel):
    """The reverse direction; also a CPU wheel on a CUDA torch, which is fine by itself but not for torch 2.14."""
    venv = make_venv("cpu213-wheel-on-torch2.14-cu130", torch214_site, cpu_wheel)
    out = assert_clean_failure(venv.run("-c", "import opkiln"))
    assert "built for: torch 2.13.x (built with 2.13.0+cpu), CPU kernels only (cpu)" in out
    assert "installed: torch 2.14.1+cu130, CUDA 13.0 (cu130)" in out
    assert "the wheel was compiled against torch 2.13" in out
    assert install_command("cu130", "2.14") in out


def test_cpu_kernels_built_against_cuda_torch(make_venv, torch214_site, cpu214_wheel):
    """A pt214cpu wheel on the CUDA torch 2.14.1 is a legal choice: it imports, runs on CPU, doctor warns."""
    venv = make_venv("cpu214-wheel-on-torch2.14-cu130", torch214_site, cpu214_wheel)
    proc = venv.run("-c", IMPORT_AND_RUN)
    assert proc.returncode == 0, proc.stderr
    assert "RESULT [0.25, 0.25, 0.25, 0.25]" in proc.stdout
    doctor = venv.run("-m", "opkiln", "doctor", "--json")
    assert doctor.returncode == 0, doctor.stderr
    report = json.loads(doctor.stdout)
    assert report["verdict"] == "warn"
    assert report["fix"] == install_command("cu130", "2.14")
    assert any(c["name"] == "kernels" and c["status"] == "warn" for c in report["checks"])


def test_skip_preflight_still_explains_loader_error(make_venv, torch213_site, cuda_wheel):
    """OPKILN_SKIP_PREFLIGHT=1 lets the loader try; its `libc10_cuda.so: cannot open ...` is still explained."""
    venv = make_venv("cuda214-wheel-on-torch2.13-cpu", torch213_site, cuda_wheel)
    proc = venv.run("-c", "import opkiln", env={"OPKILN_SKIP_PREFLIGHT": "1"})
    out = assert_clean_failure(proc)
    assert "its compiled library failed to load" in out
    assert "needs libc10_cuda.so" in out
    assert install_command("cpu", "2.13") in out
    caught = venv.run("-c", CATCH, env={"OPKILN_SKIP_PREFLIGHT": "1"})
    report = json.loads(caught.stdout)
    assert report["is_env_error"] and report["type"] == "OpkilnEnvironmentError"
    assert "libc10_cuda.so: cannot open shared object file" in report["loader_error"]


# Combinations no torch on this machine offers, made by editing a copy of a real install ------------

def _edited_copy(venv, tmp_path: Path, **changes) -> Path:
    """A copy of the venv's opkiln package with build-info fields changed; returns the dir for PYTHONPATH."""
    root = tmp_path / "shadow"
    shutil.copytree(venv.package, root / "opkiln")
    info_path = root / "opkiln" / "_build_info.json"
    info = json.loads(info_path.read_text())
    for key, value in changes.items():
        if key == "add_op":
            info["ops"] = [*info["ops"], value]
        else:
            info[key] = value
    info_path.write_text(json.dumps(info))
    return root


def test_other_python_tag(good_venv, tmp_path):
    root = _edited_copy(good_venv, tmp_path, python_tag="cp312", extension_suffix="cpython-312-x86_64-linux-gnu")
    (lib,) = (root / "opkiln").glob("_C.*.so")
    lib.rename(lib.with_name("_C.cpython-312-x86_64-linux-gnu.so"))
    out = assert_clean_failure(good_venv.run("-c", "import opkiln", env={"PYTHONPATH": str(root)}))
    assert "compiled library is for Python cp312 but this is Python cp311" in out
    assert install_command("cpu", "2.13") in out
    # Skipping the preflight: the library is then simply "missing"; that is explained too.
    out = assert_clean_failure(good_venv.run("-c", "import opkiln",
                                             env={"PYTHONPATH": str(root), "OPKILN_SKIP_PREFLIGHT": "1"}))
    assert "_C.cpython-312-x86_64-linux-gnu.so" in out and "belongs to another Python" in out
    assert "No module named 'opkiln" not in out


def test_cxx11_abi_mismatch(good_venv, tmp_path):
    root = _edited_copy(good_venv, tmp_path, cxx11_abi=False)
    out = assert_clean_failure(good_venv.run("-c", "import opkiln", env={"PYTHONPATH": str(root)}))
    assert "compiled with _GLIBCXX_USE_CXX11_ABI=0" in out and "uses _GLIBCXX_USE_CXX11_ABI=1" in out
    assert "C++11 ABI off" in out


def test_missing_op_is_named(good_venv, tmp_path):
    root = _edited_copy(good_venv, tmp_path, add_op="opkiln::not_built_here")
    out = assert_clean_failure(good_venv.run("-c", "import opkiln", env={"PYTHONPATH": str(root)}))
    assert "these operators are not registered: opkiln::not_built_here" in out


def test_stable_abi_checks_torch_min(good_venv, tmp_path):
    too_new = _edited_copy(good_venv, tmp_path / "a", abi_mode="stable", python_tag="cp310-abi3", torch_min="2.14")
    out = assert_clean_failure(good_venv.run("-c", "import opkiln", env={"PYTHONPATH": str(too_new)}))
    assert "stable ABI from torch 2.14 on, but torch 2.13.0+cpu is installed" in out
    assert install_command("cpu", "2.13") in out
    ok = _edited_copy(good_venv, tmp_path / "b", abi_mode="stable", python_tag="cp310-abi3", torch_min="2.13",
                      torch_major_minor="2.12")
    proc = good_venv.run("-c", IMPORT_AND_RUN, env={"PYTHONPATH": str(ok)})
    assert proc.returncode == 0, proc.stderr


def test_exception_type_and_parts(make_venv, torch213_site, cuda_wheel):
    venv = make_venv("cuda214-wheel-on-torch2.13-cpu", torch213_site, cuda_wheel)
    report = json.loads(venv.run("-c", CATCH).stdout)
    assert report["is_env_error"] and report["type"] == "OpkilnEnvironmentError"
    assert report["fix"] == install_command("cpu", "2.13")
    assert report["loader_error"] is None  # the preflight stopped it before the loader ran
    assert len(report["problems"]) == 2


@pytest.mark.parametrize("torch_version", ["2.13", "2.14"])
def test_stable_abi_wheel_passes_preflight_on_both_torches(make_venv, torch213_site, torch214_site, stable_cpu_wheel,
                                                           torch_version):
    """The real stable-ABI wheel: the preflight checks torch >= torch_min, not the minor it was built with."""
    site = torch213_site if torch_version == "2.13" else torch214_site
    venv = make_venv(f"stable-wheel-on-torch{torch_version}", site, stable_cpu_wheel)
    info = venv.build_info()
    assert info["abi_mode"] == "stable" and info["python_tag"] == "cp310-abi3" and info["torch_min"]
    proc = venv.run("-c", IMPORT_AND_RUN)
    assert proc.returncode == 0, proc.stderr
    assert "RESULT [0.25, 0.25, 0.25, 0.25]" in proc.stdout
    doctor = venv.run("-m", "opkiln", "doctor", "--json")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr


def test_second_copy_already_loaded_in_process(good_venv, tmp_path):
    """torch aborts the process when a second library registers the namespace; the preflight refuses first."""
    (lib,) = good_venv.package.glob("_C.*.so")
    other = tmp_path / "elsewhere" / "_C.so"
    other.parent.mkdir()
    shutil.copy2(lib, other)
    proc = good_venv.run("-c", f"import torch; torch.ops.load_library({str(other)!r}); import opkiln")
    out = assert_clean_failure(proc)
    assert "another copy of opkiln's library is already loaded in this process" in out
    assert f"(loaded from {other})" in out
    # The copy is in no installed distribution's RECORD: the fix never names it for deletion (issue 43).
    assert f"rm -rf {other}" not in out and "rm -f" not in out and "python -m opkiln doctor" in out
    assert "Only a single TORCH_LIBRARY" not in out


def test_cuda_wheel_on_matching_cuda_torch(make_venv, torch214_site, cuda_wheel):
    """The matching CUDA combination imports (no GPU needed to load) and doctor finds nothing wrong."""
    venv = make_venv("cuda214-wheel-on-torch2.14-cu130", torch214_site, cuda_wheel)
    proc = venv.run("-c", IMPORT_AND_RUN)
    assert proc.returncode == 0, proc.stderr
    assert "RESULT [0.25, 0.25, 0.25, 0.25]" in proc.stdout
    doctor = venv.run("-m", "opkiln", "doctor", "--json")
    report = json.loads(doctor.stdout)
    assert doctor.returncode == 0 and report["verdict"] == "ok", report["summary"]
    assert report["torch"]["cuda"] == "13.0" and report["torch"]["cudnn"]


def test_other_cuda_major(make_venv, torch214_site, cuda_wheel, tmp_path):
    venv = make_venv("cuda214-wheel-on-torch2.14-cu130", torch214_site, cuda_wheel)
    root = _edited_copy(venv, tmp_path, cuda="12.8", cuda_tag="cu128")
    out = assert_clean_failure(venv.run("-c", "import opkiln", env={"PYTHONPATH": str(root)}))
    assert "kernels are built with CUDA 12.8 but torch 2.14.1+cu130 uses CUDA 13.0" in out
    assert install_command("cu130", "2.14") in out
