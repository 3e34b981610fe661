#!/usr/bin/env bash
# The GPU check, run once per session on a machine with a CUDA GPU, torch, nvcc,
# cmake and ninja but no network (the H200 machine: Python 3.12, torch 2.11+cu130).
#
#   scripts/gpu_check.sh [CARRY_DIR]
#
# 1. builds the per-torch wheel against the machine's own torch with
#    --no-build-isolation (KILN_CUDA_ARCHS, default: this GPU's arch + PTX),
# 2. installs it beside that torch and runs the op tests (GPU ones included) and
#    the GPU-arch preflight test,
# 3. runs the kernel benchmark (benchmarks/bench_kernels.py),
# 4. if CARRY_DIR holds stable-ABI wheels built elsewhere, installs them unchanged
#    and runs tests/stable/gpu_check.sh,
# then writes $OUT/summary.json, $OUT/bench.json and $OUT/logs.tar.gz.
#
# CARRY_DIR (default .gpu_carry, made by `make gpu-carry`) holds tools/: wheels of
# build tools missing on the machine (scikit-build-core, pyelftools), installed into
# a private --target folder; and stable/: the stable-ABI wheels built elsewhere.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
carry=$(cd "${1:-$repo/.gpu_carry}" 2>/dev/null && pwd || echo "")
out=${OUT:-$repo/gpu-check-out}
logs=$(mktemp -d /tmp/gpu-check-logs.XXXX)
python=${PYTHON:-python3}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
declare -A status
stage() {  # <name> <timeout s> <command...>: run, log, remember the exit status
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  echo "== $name"
  timeout "$limit" "$@" > "$logs/$name.log" 2>&1
  local rc=$?
  status[$name]=$rc
  echo "   rc=$rc in $((SECONDS - t0)) s"
  tail -n 15 "$logs/$name.log"
}

{ nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader
  "$python" -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.is_available())"
  nvcc --version | tail -n 2; cmake --version | head -n 1; } > "$logs/machine.txt" 2>&1
cat "$logs/machine.txt"

# Build tools the machine lacks or has too old, from carried wheels.
site=/tmp/gpu-check-site
rm -rf "$site" && mkdir -p "$site"
if [ -n "$carry" ] && ls "$carry"/tools/*.whl > /dev/null 2>&1; then
  "$python" -m pip install -q --no-index --no-deps --no-compile --target "$site" "$carry"/tools/*.whl
fi
export PYTHONPATH=$site

archs=${KILN_CUDA_ARCHS:-$("$python" -c "import torch; m, n = torch.cuda.get_device_capability(); print(f'{m}.{n}+PTX')")}
wheels=/tmp/gpu-check-wheels
rm -rf "$wheels" /tmp/gpu-check-opkiln
stage build 420 env KILN_VARIANT=cuda KILN_CUDA_ARCHS="$archs" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
  "$python" -m pip wheel --no-build-isolation --no-deps -v -w "$wheels" -C build-dir=/tmp/gpu-check-build "$repo"
wheel=$(ls "$wheels"/opkiln-*.whl 2>/dev/null | head -n 1)
if [ -n "$wheel" ]; then
  "$python" -m pip install -q --no-deps --no-index --target /tmp/gpu-check-opkiln "$wheel"
  export PYTHONPATH=/tmp/gpu-check-opkiln:$site
  stage import 60 bash -c "cd /tmp && '$python' -m opkiln doctor"
  stage ops-tests 600 "$python" -m pytest -q -p no:cacheprovider -ra "$repo/tests/ops" \
    --junitxml "$logs/ops-junit.xml"
  stage gpu-arch-test 420 "$python" -m pytest -q -p no:cacheprovider -ra "$repo/tests/preflight/test_gpu_arch.py"
  stage bench 420 "$python" "$repo/benchmarks/bench_kernels.py" --device cuda --json "$out/bench.json"
fi

if [ -n "$carry" ] && ls "$carry"/stable/opkiln-*abi3*.whl > /dev/null 2>&1; then
  export PYTHONPATH=$site
  stage stable 600 env OUT="$logs/stable" bash "$repo/tests/stable/gpu_check.sh" "$carry/stable"
fi

"$python" - "$out/summary.json" "$wheel" "$archs" <<PY
import json, sys
status = {$(for k in "${!status[@]}"; do printf '"%s": %s, ' "$k" "${status[$k]}"; done)}
json.dump({"wheel": sys.argv[2].rsplit("/", 1)[-1], "archs": sys.argv[3], "status": status,
           "passed": bool(status) and all(v == 0 for v in status.values())}, open(sys.argv[1], "w"), indent=2)
print(json.dumps(status))
PY
tar -czf "$out/logs.tar.gz" -C "$logs" .
failed=0
for k in "${!status[@]}"; do [ "${status[$k]}" -eq 0 ] || failed=1; done
echo "gpu_check: $([ $failed -eq 0 ] && echo PASS || echo FAIL)"
exit $failed
