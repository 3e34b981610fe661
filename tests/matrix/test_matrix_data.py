"""data/matrix.json and its expansion: the table CI, CMake, `kiln wheels` and `kiln index` all read."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kiln_tool import matrix_data
from kiln_tool.matrix_data import MatrixError, build_jobs, parse_matrix

REPO = Path(__file__).resolve().parents[2]
RAW: dict[str, Any] = json.loads((REPO / "src" / "kiln_tool" / "data" / "matrix.json").read_text())


def _raw() -> dict[str, Any]:
    return copy.deepcopy(RAW)


def _expect_error(raw: dict[str, Any], *fragments: str) -> None:
    with pytest.raises(MatrixError) as info:
        parse_matrix(raw)
    for fragment in fragments:
        assert fragment in str(info.value)


def _major_minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def test_supported_range_covers_torch_2_11_to_2_15_and_python_3_10_to_3_14() -> None:
    matrix = matrix_data.load()
    minors = {r.major_minor for r in matrix.torch}
    assert {"2.11", "2.12", "2.13", "2.14", "2.15"} <= minors
    pythons = {py for job in build_jobs(matrix) for py in job.pythons}
    assert pythons == {"3.10", "3.11", "3.12", "3.13", "3.14"}
    assert set(matrix.platform_names) == {"x86_64", "aarch64"}


def test_torch_mode_is_the_product_of_the_table() -> None:
    """One job per torch x variant x platform, one wheel per Python both torch and we support."""
    jobs = build_jobs(matrix_data.load())
    expected = []
    for release in RAW["torch"]:
        pythons = tuple(p for p in release["python"] if p in RAW["python"])
        for variant in release["variants"]:
            for platform in RAW["platforms"]:
                expected.append((release["version"], variant, platform, pythons))
    assert [(j.torch, j.variant, j.platform, j.pythons) for j in jobs] == expected
    assert len({j.name for j in jobs}) == len(jobs), "job names must be unique (they name the artifacts)"
    for job in jobs:
        assert job.identifiers == tuple(f"cp{p.replace('.', '')}-manylinux_{job.platform}" for p in job.pythons)


def test_a_torch_without_python_3_10_gets_no_cp310_wheel() -> None:
    raw = _raw()
    raw["torch"][-1]["python"] = ["3.11", "3.12", "3.13", "3.14", "3.15"]
    matrix = parse_matrix(raw)
    newest = raw["torch"][-1]["version"]
    for job in build_jobs(matrix):
        if job.torch == newest:
            assert job.pythons == ("3.11", "3.12", "3.13", "3.14")  # 3.15 is beyond matrix.python


def test_stable_mode_collapses_to_one_build_per_variant_and_platform() -> None:
    matrix = matrix_data.load()
    stable = build_jobs(matrix, "stable")
    floor = _major_minor(RAW["stable_abi"]["min_torch"])
    eligible = [r for r in RAW["torch"] if _major_minor(r["version"]) >= floor]
    variants = {v for r in eligible for v in r["variants"]}
    assert {(j.variant, j.platform) for j in stable} == {(v, p) for v in variants for p in RAW["platforms"]}
    assert len(stable) == len(variants) * len(RAW["platforms"])
    for job in stable:
        shipping = [r["version"] for r in eligible if job.variant in r["variants"]]
        assert job.torch == shipping[0], "built against the oldest torch of the stable range that ships the variant"
        assert job.pythons == (RAW["stable_abi"]["python"],)
        assert job.test_torch == tuple(shipping)
        assert job.name.startswith("stable-")


def test_stable_mode_leaves_out_variants_only_older_torches_ship() -> None:
    stable = build_jobs(matrix_data.load(), "stable")
    floor = _major_minor(RAW["stable_abi"]["min_torch"])
    old_only = {v for r in RAW["torch"] for v in r["variants"]} - {
        v for r in RAW["torch"] if _major_minor(r["version"]) >= floor for v in r["variants"]
    }
    assert not old_only & {j.variant for j in stable}
    raw = _raw()
    raw["stable_abi"]["min_torch"] = RAW["torch"][0]["version"].rsplit(".", 1)[0]
    widened = build_jobs(parse_matrix(raw), "stable")
    assert old_only <= {j.variant for j in widened}


def test_build_counts_of_both_modes() -> None:
    matrix = matrix_data.load()
    counts = matrix_data.build_counts(matrix)
    torch_jobs = build_jobs(matrix, "torch")
    assert counts["torch"]["jobs"] == len(torch_jobs)
    assert counts["torch"]["wheels"] == sum(len(j.pythons) for j in torch_jobs)
    assert counts["stable"]["wheels"] == counts["stable"]["jobs"] == len(build_jobs(matrix, "stable"))
    assert counts["torch"]["wheels"] == counts["torch"]["wheels_x86_64"] + counts["torch"]["wheels_aarch64"]
    assert counts["stable"]["wheels"] < counts["torch"]["jobs"] < counts["torch"]["wheels"]


def test_local_builds_are_entries_of_the_full_matrix() -> None:
    local = matrix_data.local_builds()
    assert local, "the lead's `kiln wheels --matrix local` builds these"
    full = {spec for job in build_jobs(matrix_data.load()) for spec in job.specs}
    assert set(local) <= full
    assert all(isinstance(spec, matrix_data.BuildSpec) for spec in local)
    assert [s.name for s in local] == [f"torch{s.torch_major_minor}-{s.cuda}-py{s.python}" for s in local]


def test_local_entry_outside_the_matrix_is_refused() -> None:
    raw = _raw()
    raw["local"].append({"torch": "2.14.1", "cuda": "cu128", "python": "3.11"})
    _expect_error(raw, "matrix.local[2]", "torch2.14-cu128-py3.11", "not in the full matrix")


@pytest.mark.parametrize(
    ("mutate", "fragments"),
    [
        (lambda r: r.update(schema_version=1), ("schema_version",)),
        (lambda r: r["cuda_archs"]["13.0"]["x86_64"].reverse(), ("cuda_archs.13.0.x86_64", "ascending")),
        (lambda r: r["cuda_archs"]["13.0"]["x86_64"].append("sm_120"), ("'sm_120'",)),
        (lambda r: r["cuda_archs"]["12.8"].pop("aarch64"), ("cu128", "cuda_archs['12.8']['aarch64']")),
        (lambda r: r["cuda_toolkits"].pop("13.0"), ("cu130", "cuda_toolkits['13.0']")),
        (lambda r: r["torch"][1]["variants"].append("cu999"), ("cu999",)),
        (lambda r: r["torch"].reverse(), ("oldest first",)),
        (lambda r: r["torch"][0].update(version="2.11"), ("exact release",)),
        (lambda r: r["platforms"]["x86_64"].update(manylinux_base="quay.io/pypa/manylinux_2_28_x86_64:latest"),
         ("platforms.x86_64.manylinux_base", "digest")),
        (lambda r: r["platforms"].update(ppc64le=r["platforms"]["x86_64"]), ("ppc64le",)),
        (lambda r: r["stable_abi"].update(abi_tag="cp311-abi3"), ("abi_tag",)),
        (lambda r: r["stable_abi"].update(min_torch="2.99"), ("min_torch",)),
        (lambda r: r.update(torch_index="https://download.pytorch.org/whl/"), ("{variant}",)),
        (lambda r: r.pop("python"), ("matrix.python",)),
    ],
)
def test_inconsistent_data_is_refused_with_its_place(mutate: Any, fragments: tuple[str, ...]) -> None:
    raw = _raw()
    mutate(raw)
    _expect_error(raw, *fragments)


def test_stable_python_missing_from_the_stable_build_torch_is_refused() -> None:
    raw = _raw()
    floor = _major_minor(raw["stable_abi"]["min_torch"])
    for release in raw["torch"]:
        if _major_minor(release["version"]) >= floor:
            release["python"].remove(raw["stable_abi"]["python"])
            break
    _expect_error(raw, "stable_abi.python", "publishes no Python")


def test_select_jobs_by_glob_and_python() -> None:
    jobs = build_jobs(matrix_data.load())
    chosen = matrix_data.select_jobs(jobs, "torch2.14-cu130-*", "3.11")
    assert [j.name for j in chosen] == ["torch2.14-cu130-x86_64", "torch2.14-cu130-aarch64"]
    assert all(j.pythons == ("3.11",) for j in chosen)
    with pytest.raises(MatrixError, match="no build job matches"):
        matrix_data.select_jobs(jobs, "torch9.9-*")
    with pytest.raises(MatrixError, match=r"Python 3\.9"):
        matrix_data.select_jobs(jobs, None, "3.9")


def test_github_entries_are_strings_and_name_the_cibuildwheel_identifiers() -> None:
    matrix = matrix_data.load()
    for mode in matrix_data.MODES:
        for job in build_jobs(matrix, mode):
            entry = matrix_data.github_entry(matrix, job)
            assert all(isinstance(v, str) for v in entry.values())
            assert entry["build"].split() == list(job.identifiers)
            assert entry["runner"] == RAW["platforms"][job.platform]["runner"]
            assert entry["torch_index"].endswith("/" + job.variant)
            assert entry["kiln_variant"] == ("cpu" if job.variant == "cpu" else "cuda")
            if job.variant != "cpu":
                assert entry["cuda_archs"].endswith("+PTX") and entry["cuda_archs"].count("+PTX") == 1


def test_docker_build_args_come_from_the_table() -> None:
    matrix = matrix_data.load()
    args = matrix_data.docker_build_args(matrix, "cu130", "aarch64")
    values = dict(a.split("=", 1) for a in args[1::2])
    assert args[0::2] == ["--build-arg"] * len(values)
    assert values == {
        "BASE_IMAGE": RAW["platforms"]["aarch64"]["manylinux_base"],
        "CUDA_VERSION": "13.0",
        "CUDA_TOOLKIT": RAW["cuda_toolkits"]["13.0"],
    }
    assert dict(a.split("=", 1) for a in matrix_data.docker_build_args(matrix, "cpu", "x86_64")[1::2])[
        "CUDA_VERSION"] == "none"
    with pytest.raises(MatrixError, match="built for no torch"):
        matrix_data.docker_build_args(matrix, "cu999", "x86_64")
    with pytest.raises(MatrixError, match="unknown platform"):
        matrix_data.docker_build_args(matrix, "cu130", "riscv64")


def test_docker_base_images_are_the_ones_cibuildwheel_pins() -> None:
    """Our base = cibuildwheel's own manylinux_2_28 pin, so bumping cibuildwheel flags a stale base."""
    import cibuildwheel

    pins = (Path(cibuildwheel.__file__).parent / "resources" / "pinned_docker_images.cfg").read_text()
    for platform, entry in RAW["platforms"].items():
        assert f"manylinux_2_28 = {entry['manylinux_base']}" in pins.split(f"[{platform}]", 1)[1], platform


@pytest.mark.skipif(sys.platform != "linux", reason="CMake picks the arch list by the host processor")
def test_cmake_reads_the_same_arch_lists_as_kiln() -> None:
    """kiln's KilnCuda.cmake reads cuda_archs itself; both must agree (newest arch + PTX)."""
    import platform

    proc = "aarch64" if platform.machine() in ("aarch64", "arm64") else "x86_64"
    cmake = Path(sys.executable).parent / "cmake"
    script = (
        'include("${SRC}/cmake/KilnCuda.cmake")\n'
        'foreach(v IN LISTS VERSIONS)\n'
        '  kiln_cuda_arch_list("${v}" out MATRIX "${SRC}/src/kiln_tool/data/matrix.json")\n'
        '  message("${v}=${out}")\nendforeach()\n'
    )
    matrix = matrix_data.load()
    versions = sorted(RAW["cuda_archs"])
    probe = subprocess.run(
        [str(cmake), f"-DSRC={REPO}", f"-DVERSIONS={';'.join(versions)}", "-P", "/dev/stdin"],
        input=script, capture_output=True, text=True, check=True,
    )
    seen = dict(line.split("=", 1) for line in probe.stderr.splitlines() if "=" in line)
    assert seen == {v: ";".join(matrix_data.arch_list(matrix, v, proc)) for v in versions}
