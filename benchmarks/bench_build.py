#!/usr/bin/env python3
"""Build speed: our CMake/scikit-build-core path against torch.utils.cpp_extension, same sources.

    python benchmarks/bench_build.py [--variant cpu|cu130] [--archs "9.0+PTX"] [--reps 3] [--json PATH]

Measured in one run, on the same sources, flags (-O3, the torch's C++ standard)
and arch list:
  - cold build, ours (`pip wheel --no-build-isolation`, fresh build dir, no compiler cache)
    and cpp_extension (setuptools + ninja, `setup.py build_ext`), median of --reps each;
  - a rebuild with no change (ours, same build dir);
  - a rebuild with ccache after a clean (ours: warm the cache, `cmake --build --target clean`,
    build), and after deleting the whole build folder (a fresh configure, reported beside it).
Targets (issue 8): ours <= 0.7x cpp_extension cold; ccache rebuild <= 15% of cold;
no-change rebuild <= 3 s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from kiln_tool.build_env import ensure_build_env  # noqa: E402
from kiln_tool.matrix_data import local_builds  # noqa: E402

TARGETS = {"cold_ratio_max": 0.7, "ccache_fraction_max": 0.15, "nochange_s_max": 3.0}

SETUP_PY = """
import os, sys
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension
sources = {sources!r}
cuda = {cuda!r}
std = "-std=c++{std}"
args = {{"cxx": ["-O3", std, "-fvisibility=hidden"]}}
if cuda:
    args["nvcc"] = ["-O3", std, "--expt-relaxed-constexpr", "-DOPKILN_WITH_CUDA=1"]
    args["cxx"].append("-DOPKILN_WITH_CUDA=1")
    ext = CUDAExtension("opkiln_cppext._C", sources, include_dirs=[{include!r}], extra_compile_args=args)
else:
    ext = CppExtension("opkiln_cppext._C", sources, include_dirs=[{include!r}], extra_compile_args=args)
setup(name="opkiln_cppext", ext_modules=[ext], cmdclass={{"build_ext": BuildExtension}})
"""


def clean_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CMAKE_", "CCACHE_", "OPKILN_"))}
    env.update(extra)
    return env


def timed(cmd: list[str], env: dict[str, str], cwd: Path, log: Path) -> float:
    started = time.perf_counter()
    with log.open("a") as fh:
        proc = subprocess.run(cmd, env=env, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"build failed ({' '.join(cmd[:4])} ...); see {log}")
    return elapsed


def sources(cuda: bool) -> list[str]:
    """What ops/CMakeLists.txt compiles in the per-torch mode: each op's kernel core and binding, the facade."""
    ops = REPO / "ops"
    bindings = sorted(ops.glob("*/binding.cpp"))
    cores = sorted(p for b in bindings for p in b.parent.glob("*.cpp") if p.name != "binding.cpp")
    files = [*cores, ops / "facade" / "aten.cpp", *bindings, ops / "facade" / "module.cpp"]
    if cuda:
        files += [ops / "common" / "arch_check.cu", *sorted(p for b in bindings for p in b.parent.glob("*.cu"))]
    return [str(f) for f in files]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", default="cpu", help="local combination by CUDA tag (cpu, cu130)")
    parser.add_argument("--archs", default=None, help="CUDA arch list for both builds (default: kiln's matrix.json)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    if args.reps < 3:
        parser.error("--reps must be at least 3 (a median of at least 3)")
    (spec,) = [s for s in local_builds() if s.cuda == args.variant]
    cuda = spec.cuda != "cpu"
    work = Path(tempfile.mkdtemp(prefix="bench-build-"))
    log = work / "build.log"
    python = ensure_build_env(spec, log)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "setuptools"], check=True)
    archs = args.archs
    if cuda and archs is None:
        info = json.loads(subprocess.run([str(python), "-m", "kiln_tool.build_config", "--format", "json"],
                                         env=clean_env({"PYTHONPATH": str(REPO / "src"),
                                                        "KILN_VARIANT": "cuda"}),
                                         capture_output=True, text=True, check=True).stdout)
        matrix = json.loads((REPO / "src" / "kiln_tool" / "data" / "matrix.json").read_text())
        listed = list(matrix["cuda_archs"][info["torch"]["cuda"]]["x86_64"])
        archs = ";".join([*listed[:-1], listed[-1] + "+PTX"])
    std = json.loads(subprocess.run([str(python), "-m", "kiln_tool.build_config", "--format", "json"],
                                    env=clean_env({"PYTHONPATH": str(REPO / "src")}), capture_output=True,
                                    text=True, check=True).stdout)["torch"]["cxx_standard"]
    # Cold means cold: torch.utils.cpp_extension puts ccache in front of the compiler
    # on its own when it finds one, so the cache is switched off for both paths.
    common = {"MAX_JOBS": str(args.jobs), "CMAKE_BUILD_PARALLEL_LEVEL": str(args.jobs), "CCACHE_DISABLE": "1"}
    if cuda:
        common.update({"TORCH_CUDA_ARCH_LIST": archs or "", "KILN_CUDA_ARCHS": archs or "",
                       "CUDA_HOME": os.environ.get("CUDA_HOME", "/usr/local/cuda-13.0")})
    ours_env = clean_env({**common, "KILN_VARIANT": "cuda" if cuda else "cpu",
                          **({"KILN_CUDA_ARCHS": archs} if cuda and archs else {})})

    def ours(build_dir: Path, env: dict[str, str]) -> float:
        out = work / "wheels"
        shutil.rmtree(out, ignore_errors=True)
        return timed([str(python), "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-q", "-w", str(out),
                      "-C", f"build-dir={build_dir}", str(REPO)], env, REPO, log)

    setup_dir = work / "cppext"
    setup_dir.mkdir()
    (setup_dir / "setup.py").write_text(SETUP_PY.format(sources=sources(cuda), include=str(REPO / "ops"), cuda=cuda,
                                                        std=std))

    def cppext() -> float:
        shutil.rmtree(setup_dir / "build", ignore_errors=True)
        return timed([str(python), "setup.py", "build_ext", "-b", str(setup_dir / "build" / "lib"),
                      "-t", str(setup_dir / "build" / "tmp")], clean_env(common), setup_dir, log)

    ours_cold: list[float] = []
    cpp_cold: list[float] = []
    for rep in range(args.reps):
        build_dir = work / f"ours-{rep}"
        ours_cold.append(ours(build_dir, ours_env))
        cpp_cold.append(cppext())
        print(f"  rep {rep + 1}: ours {ours_cold[-1]:.1f} s, cpp_extension {cpp_cold[-1]:.1f} s", flush=True)
        if rep < args.reps - 1:
            shutil.rmtree(build_dir)
    nochange = ours(work / f"ours-{args.reps - 1}", ours_env)

    ccache = shutil.which("ccache")
    ccache_s = ccache_rmrf_s = None
    if ccache:
        cache_env = {**{k: v for k, v in ours_env.items() if k != "CCACHE_DISABLE"},
                     "CCACHE_DIR": str(work / "ccache"), "CCACHE_BASEDIR": str(REPO),
                     "CMAKE_C_COMPILER_LAUNCHER": ccache, "CMAKE_CXX_COMPILER_LAUNCHER": ccache,
                     "CMAKE_CUDA_COMPILER_LAUNCHER": ccache}
        cached = work / "ours-ccache"
        ours(cached, cache_env)  # warm the cache
        # "make clean": objects and the module go, the configured tree stays.
        cmake = python.parent / "cmake"
        subprocess.run([str(cmake), "--build", str(cached), "--target", "clean"], check=True, capture_output=True)
        ccache_s = ours(cached, cache_env)
        # The harsher clean: the whole build folder goes, so CMake configures from scratch.
        shutil.rmtree(cached)
        ccache_rmrf_s = ours(cached, cache_env)

    cold_ours, cold_cpp = statistics.median(ours_cold), statistics.median(cpp_cold)
    result = {
        "benchmark": "build", "combination": spec.name, "archs": archs, "reps": args.reps, "jobs": args.jobs,
        "ours_cold_s": [round(x, 2) for x in ours_cold], "cpp_extension_cold_s": [round(x, 2) for x in cpp_cold],
        "ours_cold_median_s": round(cold_ours, 2), "cpp_extension_cold_median_s": round(cold_cpp, 2),
        "cold_ratio": round(cold_ours / cold_cpp, 3), "nochange_rebuild_s": round(nochange, 2),
        "ccache_rebuild_s": round(ccache_s, 2) if ccache_s is not None else None,
        "ccache_fraction_of_cold": round(ccache_s / cold_ours, 3) if ccache_s is not None else None,
        "ccache_rebuild_after_rm_build_dir_s": round(ccache_rmrf_s, 2) if ccache_rmrf_s is not None else None,
        "ccache_after_rm_fraction_of_cold": round(ccache_rmrf_s / cold_ours, 3) if ccache_rmrf_s is not None
        else None,
        "targets": TARGETS,
    }
    result["meets_targets"] = {
        "cold_ratio": result["cold_ratio"] <= TARGETS["cold_ratio_max"],
        "ccache": ccache_s is not None and result["ccache_fraction_of_cold"] <= TARGETS["ccache_fraction_max"],
        "nochange": nochange <= TARGETS["nochange_s_max"],
    }
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
