"""The container pipeline's parts that need no container: what it copies, maps, lays out and measures."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln_tool.audit.checks.wheel import _release_results
from kiln_tool.audit.context import ReleaseRule
from kiln_tool.containers import measure
from kiln_tool.containers.cibw import container_pip_env, emulation_mounts, export_tree, host_arch
from kiln_tool.containers.engine import load_recipe
from kiln_tool.containers.images import DOCKER_DIR
from kiln_tool.containers.standin import _labels, image_names

REPO = Path(__file__).resolve().parents[2]
LAYOUT = DOCKER_DIR / "layout-cuda-root.sh"


def test_local_pip_sources_are_seen_under_the_host_mount() -> None:
    env = container_pip_env({"find-links": "/opt/wheels https://example.org/links",
                             "extra-index-url": "file:///opt/pypi/simple file:///opt/more/simple"})
    assert env == {"PIP_FIND_LINKS": "/host/opt/wheels https://example.org/links",
                   "PIP_EXTRA_INDEX_URL": "file:///host/opt/pypi/simple file:///host/opt/more/simple"}
    assert container_pip_env({}) == {}


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t"})


def test_the_export_holds_tracked_and_new_files_but_nothing_ignored(tmp_path: Path) -> None:
    """cibuildwheel copies its whole working directory into the container: never venvs or builds."""
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".gitignore").write_text("/.venvs/\n/build/\n")
    (repo / "src" / "a.py").write_text("a = 1\n")
    (repo / "gone.txt").write_text("x")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "x")
    (repo / "src" / "a.py").write_text("a = 2\n")  # an uncommitted edit travels
    (repo / "new.txt").write_text("new")  # so does a new file git does not ignore
    (repo / "gone.txt").unlink()  # a deleted one does not
    for ignored in (".venvs/torch/bin/python", "build/x/obj.o"):
        (repo / ignored).parent.mkdir(parents=True)
        (repo / ignored).write_text("big")
    out = export_tree(tmp_path / "export", repo)
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert files == [".gitignore", "new.txt", "src/a.py"]
    assert (out / "src" / "a.py").read_text() == "a = 2\n"


def test_the_standin_says_what_it_is_in_its_name_and_labels() -> None:
    recipe = load_recipe()["standin"]
    assert isinstance(recipe, dict)
    runtime, build = image_names("x86_64", "0123456789abcdef")
    for name in (runtime, build):
        assert name.startswith(f"kiln-standin-{recipe['suite']}-glibc{recipe['glibc']}:")
    labels = " ".join(_labels("build", "0123456789abcdef"))
    assert 'kiln.standin="true"' in labels and f'kiln.glibc="{recipe["glibc"]}"' in labels
    assert f'kiln.manylinux_tag="{recipe["manylinux_tag"]}"' in labels and "not manylinux_2_28" in labels


def _fake_cuda_wheels(root: Path, components: dict[str, list[str]]) -> Path:
    for component, files in components.items():
        for rel in files:
            path = root / "nvidia" / component / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(rel)
            if rel.startswith("bin/"):
                path.chmod(0o755)
    return root


@pytest.mark.parametrize("components", [
    {"cu13": ["bin/nvcc", "bin/ptxas", "include/cuda_runtime.h", "lib/libcudart.so.13", "nvvm/bin/cicc"]},
    {"cuda_nvcc": ["bin/nvcc", "bin/ptxas", "include/crt/host_config.h"],
     "cuda_runtime": ["include/cuda_runtime.h", "lib/libcudart.so.12"], "cuda_cccl": ["include/cub/cub.cuh"]},
], ids=["cuda13-one-root", "cuda12-one-folder-per-component"])
def test_the_cuda_wheels_become_one_toolkit_root(tmp_path: Path, components: dict[str, list[str]]) -> None:
    wheels = _fake_cuda_wheels(tmp_path / "wheels", components)
    root = tmp_path / "cuda"
    result = subprocess.run([str(LAYOUT), str(wheels), str(root)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    for files in components.values():
        for rel in files:
            assert (root / rel).read_text() == rel
    assert os.readlink(root / "lib64") == "lib"
    assert (root / "targets" / "x86_64-linux" / "include" / "cuda_runtime.h").is_file()
    versioned = next(p.name for p in (root / "lib").glob("libcudart.so.*"))
    assert os.readlink(root / "lib" / "libcudart.so") == versioned


@pytest.mark.parametrize(("components", "message"), [
    ({}, "no CUDA component"),
    ({"cu13": ["include/cuda_runtime.h", "lib/libcudart.so.13"]}, "no bin/nvcc"),
    ({"cu13": ["bin/nvcc", "include/cuda_runtime.h"]}, "no libcudart.so.<major>"),
])
def test_an_incomplete_toolkit_is_refused(tmp_path: Path, components: dict[str, list[str]], message: str) -> None:
    wheels = _fake_cuda_wheels(tmp_path / "wheels", components)
    (wheels / "nvidia").mkdir(parents=True, exist_ok=True)
    result = subprocess.run([str(LAYOUT), str(wheels), str(tmp_path / "cuda")], capture_output=True, text=True)
    assert result.returncode == 1 and message in result.stderr


def _artifact(tags: tuple[str, ...], rule: ReleaseRule) -> tuple[SimpleNamespace, SimpleNamespace]:
    wheel = SimpleNamespace(name=SimpleNamespace(platform_tags=tags), path=Path("opkiln-0.1.0-cp311-cp311-x.whl"))
    return SimpleNamespace(release=rule, arch="x86_64"), wheel


@settings(max_examples=60, derandomize=True, deadline=None)
@given(glibc=st.lists(st.integers(min_value=5, max_value=41), min_size=1, max_size=3, unique=True))
def test_a_release_wheel_is_never_tagged_above_the_floor(glibc: list[int]) -> None:
    tags = tuple(f"manylinux_2_{minor}_x86_64" for minor in sorted(glibc))
    artifact, wheel = _artifact(tags, ReleaseRule(floor=(2, 28)))
    (result,) = _release_results(artifact, wheel)  # type: ignore[arg-type]
    assert result.ok == all(minor <= 28 for minor in glibc)
    if not result.ok:
        assert result.finding == "above-release-floor" and "manylinux_2_28" in result.detail


def test_a_tag_without_a_manylinux_claim_is_not_a_release_tag() -> None:
    artifact, wheel = _artifact(("linux_x86_64",), ReleaseRule(floor=(2, 28)))
    (result,) = _release_results(artifact, wheel)  # type: ignore[arg-type]
    assert not result.ok and "linux_x86_64" in result.detail


@pytest.mark.parametrize(("tags", "ok"), [
    (("manylinux_2_34_x86_64",), True),
    (("manylinux_2_28_x86_64",), False),  # not what the stand-in gives: something else built it
    (("manylinux_2_34_x86_64", "manylinux_2_35_x86_64"), False),
    (("manylinux_2_34_aarch64",), False),
])
def test_a_standin_run_asserts_exactly_its_bases_tag(tags: tuple[str, ...], ok: bool) -> None:
    artifact, wheel = _artifact(tags, ReleaseRule(floor=(2, 28), standin_tag="manylinux_2_34"))
    (result,) = _release_results(artifact, wheel)  # type: ignore[arg-type]
    assert result.ok == ok
    assert ("STAND-IN" in result.detail) and ("not a release wheel" in result.detail) == ok


def test_kiln_audit_release_refuses_a_malformed_standin_tag(tmp_path: Path) -> None:
    result = subprocess.run(["python3", str(REPO / "scripts" / "kiln"), "audit", "--release", str(tmp_path / "x.whl")],
                            capture_output=True, text=True, env={**os.environ, "KILN_STANDIN_MANYLINUX": "2_34"})
    assert result.returncode == 2 and "is not like manylinux_2_34" in result.stderr


def test_the_compile_meter_is_read_per_wheel(tmp_path: Path) -> None:
    cores = "ops/CMakeFiles/ringops_kernel_cores.dir"
    (tmp_path / "cp311-cp311.tsv").write_text(
        f"{cores}/nms/nms_cuda.cu.o\t30.5\t0\tcore\n{cores}/nms/nms_cpu.cpp.o\t1.5\t0\tcore\n"
        "ops/CMakeFiles/_C.dir/Unity/unity_op_bindings_cxx.cxx.o\t8.0\t0\tbinding\n")
    (tmp_path / "cp311-cp311.statslog").write_text(
        "# /project/ops/nms/nms_cuda.cu\ncache_miss\ndirect_cache_miss\n# /project/ops/nms/nms_cpu.cpp\ncache_miss\n"
        "# /project/build/cp311/ops/Unity/unity_op_bindings_cxx.cxx\ncache_miss\n")
    (tmp_path / "cp312-cp312.tsv").write_text(
        f"{cores}/nms/nms_cuda.cu.o\t0.1\t0\tcore\n{cores}/nms/nms_cpu.cpp.o\t0.1\t0\tcore\n"
        "ops/CMakeFiles/_C.dir/Unity/unity_op_bindings_cxx.cxx.o\t8.5\t0\tbinding\n")
    (tmp_path / "cp312-cp312.statslog").write_text(
        "# /project/ops/nms/nms_cuda.cu\ndirect_cache_hit\n# /project/ops/nms/nms_cpu.cpp\npreprocessed_cache_hit\n"
        "# /project/build/cp312/ops/Unity/unity_op_bindings_cxx.cxx\ncache_miss\n")
    first, second = measure.read_meter(tmp_path)
    assert (first.build, second.build) == ("cp311-cp311", "cp312-cp312")
    assert (first.objects, first.cpu_seconds, first.hits, first.misses) == (3, 40.0, 0, 3)
    assert (first.kernel_core_objects, first.kernel_core_misses) == (2, 2)
    assert (second.hits, second.misses, second.kernel_core_misses) == (2, 1, 0)
    assert round(second.cpu_seconds, 1) == 8.7


def _meter(tmp_path: Path, cwd: Path, path_head: str, *args: str) -> None:
    """Run the compile-meter around a stand-in ccache (exit 3), into tmp_path/meter."""
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    (fake / "ccache").write_text("#!/bin/sh\nexit 3\n")
    (fake / "ccache").chmod(0o755)
    meter = tmp_path / "meter"
    cwd.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PATH": f"{path_head}{fake}:{os.environ['PATH']}", "KILN_COMPILE_METER_DIR": str(meter)}
    proc = subprocess.run(["bash", str(measure.METER), *args], cwd=cwd, env=env, capture_output=True, text=True)
    assert proc.returncode == 3, proc.stderr


def test_the_compile_meter_names_each_compiles_wheel_and_scope(tmp_path: Path) -> None:
    """Any project, any build folder: the wheel is the CPython cibuildwheel put first on PATH; a compile that sees
    torch's or Python's headers (directly or in a response file) is a binding, the rest kernel cores."""
    rsp = tmp_path / "includes_CUDA.rsp"
    rsp.write_text("-isystem /opt/python/cp311-cp311/lib/python3.11/site-packages/torch/include\n")
    project = tmp_path / "anywhere" / "src"
    _meter(tmp_path, project, "/opt/python/cp311-cp311/bin:", "g++", "-c", "k.cpp", "-o", "k.o")
    _meter(tmp_path, project, "/opt/python/cp311-cp311/bin:", "nvcc", f"@{rsp}", "-o", "b.o")
    _meter(tmp_path, project, "/opt/python/cp312-cp312/bin:", "g++", "-I/usr/include/python3.12", "-o", "p.o")
    _meter(tmp_path, tmp_path / "build" / "cp39-abi3-linux" / "ops", "", "g++", "-o", "q.o")
    rows = [[table.name, line.split("\t")[0], *line.split("\t")[2:]]
            for table in sorted((tmp_path / "meter").glob("*.tsv")) for line in table.read_text().splitlines()]
    assert sorted(rows) == sorted([
        ["cp311-cp311.tsv", "k.o", "3", "core"], ["cp311-cp311.tsv", "b.o", "3", "binding"],
        ["cp312-cp312.tsv", "p.o", "3", "binding"], ["cp39-abi3-linux.tsv", "q.o", "3", "core"]])


def test_the_container_recipe_is_data() -> None:
    data = json.loads((REPO / "src" / "kiln_tool" / "data" / "containers.json").read_text())
    assert data["schema_version"] == 1
    assert "--bridge=none" in data["engine"]["dockerd_args"]
    assert set(data["standin"]["debian_arch"]) >= {"x86_64"}


def test_an_emulated_container_gets_its_architectures_cpuinfo() -> None:
    """qemu-user 7.2 passes the host's /proc/cpuinfo through; torch's cpuinfo library crashes on an x86_64 one."""
    assert emulation_mounts(host_arch()) == ""
    other = "aarch64" if host_arch() == "x86_64" else "x86_64"
    mount = emulation_mounts(other)
    if other == "aarch64":
        source = REPO / "src" / "kiln_tool" / "data" / "emulation" / "aarch64-cpuinfo"
        assert mount == f" --volume={source}:/proc/cpuinfo:ro --env=QEMU_CPU=neoverse-n1"
        text = source.read_text()
        assert "CPU implementer" in text and "Features" in text and " sve" not in text


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(0o755)
    return path


def _adopter(root: Path) -> None:
    """A project that is not opkiln, in a git checkout with an ignored build folder."""
    (root / "ringops").mkdir(parents=True)
    (root / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["scikit-build-core"]\nbuild-backend = "scikit_build_core.build"\n\n'
        '[project]\nname = "Ring-Ops"\ndynamic = ["version"]\n\n[tool.kiln]\npackage = "ringops"\nversion = "0.3.0"\n')
    (root / "ringops" / "__init__.py").write_text("")
    (root / ".gitignore").write_text("/build/\n")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    _git(root, "add", ".")
    _git(root, "commit", "-qm", "x")
    (root / "build").mkdir()
    (root / "build" / "big.o").write_text("x")


@pytest.mark.parametrize("made", ["ring_ops", "opkiln"])
def test_cibuildwheel_runs_on_an_export_of_the_configured_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  made: str) -> None:
    """Any project: its tree exported (nothing ignored), its commit and its matrix's job values passed, and only
    wheels named after it kept."""
    from kiln_tool.containers import cibw
    from kiln_tool.containers.engine import ContainerError, Engine
    from kiln_tool.containers.images import Base
    from kiln_tool.project import load_project

    root = tmp_path / "ringops"
    _adopter(root)
    project = load_project(root)
    seen = tmp_path / "seen"
    docker = _script(tmp_path / "docker", 'if [[ "$*" == *--format* ]]; then echo sha256:base; fi\n')
    cibuildwheel = _script(tmp_path / "cibuildwheel", f"""
out=""; prev=""
for a in "$@"; do [[ "$prev" == --output-dir ]] && out=$a; prev=$a; done
{{ pwd; find . -type f | sort; env | grep -E '^(KILN|CIBW|PIP)_' | sort; }} > {seen}
touch "$out/{made}-0.3.0+pt213cpu-cp311-cp311-manylinux_2_34_x86_64.whl"
""")
    monkeypatch.setattr(cibw, "STATE_DIR", tmp_path / "state")
    monkeypatch.setattr(cibw, "CCACHE_HOST_DIR", tmp_path / "ccache")
    monkeypatch.setenv("KILN_CUDA_ARCHS", "from-the-host")  # the caller's KILN_* never reach the run
    (tmp_path / "state").mkdir()
    job = cibw.job_for("cpu", ("3.11",), host_arch(), project)
    out = tmp_path / "wheelhouse"

    def run() -> cibw.CibwRun:
        return cibw.run_cibuildwheel(Engine(docker=str(docker), started_pid=None), Base("base", None), job, out,
                                     project=project, log=tmp_path / "log", cibuildwheel=cibuildwheel,
                                     pythons=("3.11",), find_links=(tmp_path / "kiln-wheels",))

    if made != "ring_ops":
        with pytest.raises(ContainerError, match=r"cibuildwheel made wheels that are not ring-ops's: opkiln-0\.3\.0"):
            run()
        return
    result = run()
    assert [w.name for w in result.wheels] == ["ring_ops-0.3.0+pt213cpu-cp311-cp311-manylinux_2_34_x86_64.whl"]
    lines = seen.read_text().splitlines()
    assert lines[0].endswith("/ring-ops") and "./build/big.o" not in lines
    assert {"./.gitignore", "./pyproject.toml", "./ringops/__init__.py"} <= set(lines)
    env = dict(line.split("=", 1) for line in lines if "=" in line and line.startswith(("KILN_", "CIBW_", "PIP_")))
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert env["KILN_GIT_COMMIT"] == head.strip() and env["KILN_TORCH_VERSION"] == job.torch
    assert env["KILN_GIT_DIRTY"] in ("0", "1")  # the export has no .git: the build info's git_dirty comes from here
    assert env["CIBW_BUILD"] == f"cp311-manylinux_{host_arch()}" and "KILN_CUDA_ARCHS" not in env
    assert env["PIP_FIND_LINKS"] == f"/host{tmp_path}/kiln-wheels"


def test_the_rehearsal_reads_the_guards_fix_as_a_shell_would() -> None:
    """The mismatched install's check: the guard's error, whose fix parses back (shlex) into a pip install of the
    project from this combination's page, whatever options the fix carries."""
    from types import SimpleNamespace

    from kiln_tool.containers.rehearsal import Mismatch, _mismatch_problem

    project = SimpleNamespace(name="opkiln", package="opkiln")
    mismatch = Mismatch(wheel_url="http://127.0.0.1:1/x.whl", wheel="x.whl")
    url, page = "http://127.0.0.1:8000/", "cpu/torch2.13/"  # the page's folder, as the rehearsal names it
    head = "opkiln.OpkilnEnvironmentError: opkiln cannot be imported: this opkiln wheel was built for another\n"
    for shown in (f"{url}{page}index.html", f"{url}{page}"):
        good = head + f"  fix:   here:\n           pip install --force-reinstall --no-deps opkiln -f {shown}\n"
        assert _mismatch_problem(project, good, url, page, mismatch) is None  # type: ignore[arg-type]
    for bad in (head + f"  fix: pip install --no-deps other -f {url}{page}\n",
                head + "  fix: pip install opkiln -f https://elsewhere.example/cpu/torch2.13/index.html\n",
                head + f"  fix: pip install opkiln -f {url}cu130/torch2.14/index.html\n",
                head + f"  fix: pip install opkiln -f '{url}{page}\n",  # does not parse
                f"ImportError: libc10.so: cannot open shared object file\n  pip install opkiln -f {url}{page}\n"):
        assert _mismatch_problem(project, bad, url, page, mismatch) is not None, bad  # type: ignore[arg-type]
