"""Bit-for-bit reproducible wheels (issue 6): the real checks (one build against the wheel `kiln wheels` made, and
the two-build form), and the diff report."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from kiln_tool.repro import explain_difference
from support.dist_wheels import current_dist_wheel

REPO = Path(__file__).resolve().parents[2]
CU130_REPRO_ARCHS = "8.0;9.0+PTX"


@pytest.mark.slow
def test_the_cpu_wheel_kiln_wheels_made_is_rebuilt_byte_for_byte_elsewhere() -> None:
    """`kiln repro --once`: one build under the second conditions (another path and filesystem, listing order,
    umask, locale, TZ, no compiler cache) against the wheel `kiln wheels` left in dist/ (built in the checkout,
    with the cache). Every condition still differs, for one build's time. Without a current dist/ wheel, the
    two-build form (below for cu130) runs instead."""
    made = current_dist_wheel("opkiln-*+pt213cpu-*.whl")
    if made is None:
        _two_builds("cpu", None)
        return
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "kiln"), "repro", "--once", "--variant", "cpu",
                           "--json"], capture_output=True, text=True, timeout=2400, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["identical"] is True and doc["once"] is True, doc["differences"]
    (build,) = doc["builds"]
    assert doc["dist_wheel"] == {"path": str(made), "sha256": hashlib.sha256(made.read_bytes()).hexdigest(),
                                 "identical": True}
    assert build["wheel"] == made.name and "manylinux" in made.name


@pytest.mark.slow
def test_the_cuda_wheel_is_byte_identical_across_two_builds() -> None:
    # The two-build form: cu130 compiles CUDA without a GPU, twice and cold: two SASS archs and PTX (a fatbin of
    # several entries, each compile as the release's) rather than the matrix's whole list, which
    # `make repro VARIANT=cu130` builds.
    _two_builds("cu130", {**os.environ, "KILN_CUDA_ARCHS": CU130_REPRO_ARCHS})


def _two_builds(variant: str, env: dict[str, str] | None) -> None:
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "kiln"), "repro", "--variant", variant, "--json"],
                          capture_output=True, text=True, timeout=2400, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["identical"] is True
    a, b = doc["builds"]
    assert a["repaired_sha256"] == b["repaired_sha256"] and a["built_sha256"] == b["built_sha256"]
    assert a["wheel"].startswith("opkiln-") and "manylinux" in a["wheel"]


def _zip(path: Path, members: dict[str, bytes], mode: int = 0o644) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            info = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
            info.external_attr = mode << 16
            zf.writestr(info, data)
    return path


def test_a_difference_is_reported_by_member(tmp_path: Path) -> None:
    a = _zip(tmp_path / "a.whl", {"pkg/x.py": b"1", "pkg/y.py": b"same"})
    b = _zip(tmp_path / "b.whl", {"pkg/x.py": b"2", "pkg/y.py": b"same"})
    lines = explain_difference(a, b)
    assert lines == ["pkg/x.py: contents differ (1 vs 1 bytes)"]
    c = _zip(tmp_path / "c.whl", {"pkg/x.py": b"1", "pkg/y.py": b"same"}, mode=0o600)
    assert any("mode 644 vs 600" in line for line in explain_difference(a, c))


def test_sbom_names_the_toolchain_with_versions(cpu_wheel: Path, cuda_wheel: Path) -> None:
    for wheel, needs_nvcc in ((cpu_wheel, False), (cuda_wheel, True)):
        with zipfile.ZipFile(wheel) as zf:
            (name,) = [n for n in zf.namelist() if "/sboms/" in n and n.endswith(".cdx.json")]
            assert name.split("/")[0].endswith(".dist-info")
            sbom = json.loads(zf.read(name))
            info = json.loads(zf.read("opkiln/_build_info.json"))
        assert sbom["bomFormat"] == "CycloneDX" and sbom["specVersion"] == "1.6"
        versions = {c["name"]: c["version"] for c in sbom["components"]}
        for tool in ("gcc", "cmake", "ninja", "scikit-build-core", "torch", "python"):
            assert versions.get(tool), f"{tool} missing from the SBOM of {wheel.name}"
        assert versions["torch"] == info["torch_version"]
        assert ("nvcc" in versions) == needs_nvcc
        if needs_nvcc:
            assert versions["nvcc"].startswith("13.0")
        props = {p["name"]: p["value"] for p in sbom["metadata"]["component"]["properties"]}
        assert props["kiln:source_hash"] == info["source_hash"]


def test_build_toolchain_lock_pins_every_input_with_hashes() -> None:
    wanted = [line.split("==")[0] for line in (REPO / "requirements" / "build.in").read_text().splitlines()
              if line and not line.startswith("#")]
    lock = (REPO / "src" / "kiln_tool" / "data" / "requirements" / "build.lock").read_text()
    blocks = [b for b in lock.split("\n") if b and not b.startswith((" ", "#"))]
    pinned = {b.split("==")[0]: b for b in blocks}
    for name in wanted:
        assert name in pinned, f"{name} is not in build.lock"
    entries = lock.replace("\\\n", "").splitlines()
    for entry in entries:
        if entry and not entry.startswith((" ", "#")):
            assert "--hash=sha256:" in entry, f"no hash for {entry.split()[0]}"
