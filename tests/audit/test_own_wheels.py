"""Our own wheels pass: zero false positives, on the CPU and the CUDA wheel, repaired as the pipeline does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from audit_corpus import run_kiln

from kiln_tool.audit import CHECK_IDS, AuditOptions, audit_paths

EXCLUDES = ("libtorch*.so", "libc10*.so", "libcudart.so.*")


def repaired(wheel: Path, out: Path) -> Path:
    """auditwheel repair as `kiln wheels` runs it (torch and CUDA libraries excluded)."""
    if "manylinux" in wheel.name:
        return wheel
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    args = [sys.executable, "-m", "auditwheel", "repair", "-w", str(out)]
    for pattern in EXCLUDES:
        args += ["--exclude", pattern]
    subprocess.run([*args, str(wheel)], check=True, capture_output=True, env=env)
    (result,) = out.glob("*.whl")
    return result


def assert_passes(wheel: Path) -> dict[str, object]:
    result = run_kiln("audit", "--json", str(wheel))
    document = json.loads(result.stdout)
    failures = [(lib["path"], c["id"], c["detail"]) for a in document["artifacts"] for lib in a["libraries"]
                for c in lib["checks"] if not c["ok"]]
    failures += [("(wheel)", c["id"], c["detail"]) for a in document["artifacts"] for c in a["checks"] if not c["ok"]]
    assert failures == [], failures
    assert result.returncode == 0
    (artifact,) = document["artifacts"]
    return artifact  # type: ignore[no-any-return]


def test_cpu_wheel_passes(cpu_wheel: Path, tmp_path: Path) -> None:
    artifact = assert_passes(repaired(cpu_wheel, tmp_path))
    (library,) = artifact["libraries"]
    ran = {c["id"] for c in library["checks"]} | {c["id"] for c in artifact["checks"]}
    assert ran == set(CHECK_IDS) - {"cuda-sass", "cuda-ptx"}
    assert "build info torch_version" in artifact["target"]["torch"]


def test_cuda_wheel_passes(cuda_wheel: Path, tmp_path: Path) -> None:
    artifact = assert_passes(repaired(cuda_wheel, tmp_path))
    (library,) = artifact["libraries"]
    assert {c["id"] for c in library["checks"]} >= {"cuda-sass", "cuda-ptx", "undefined-symbols"}
    archs = build_info_of(cuda_wheel)["cuda_archs"]
    newest = archs[-1].split("+")[0].replace(".", "")
    assert f"compute_{newest}" in library["cuda_manifest"]["ptx"]
    assert len(library["cuda_manifest"]["sass"]) == len(archs)


def test_unrepaired_wheel_is_held_to_the_policy(unrepaired_cpu_wheel: Path) -> None:
    """A linux_x86_64 wheel claims no manylinux policy, so --policy applies: on a host newer than
    manylinux_2_28 only symbol-versions may fail (and says how to fix it)."""
    assert unrepaired_cpu_wheel.name.endswith("-linux_x86_64.whl"), unrepaired_cpu_wheel.name
    report = audit_paths([unrepaired_cpu_wheel], AuditOptions(policy="manylinux_2_28"))
    failed = {c.id for _, _, c in report.failures()}
    assert failed <= {"symbol-versions"}
    assert audit_paths([unrepaired_cpu_wheel], AuditOptions(policy="manylinux_2_39")).ok


def build_info_of(wheel: Path) -> dict[str, list[str]]:
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith("/_build_info.json"))
        return json.loads(zf.read(name))  # type: ignore[no-any-return]
