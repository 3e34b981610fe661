#!/usr/bin/env bash
# GPU check of the stable-ABI wheels on a machine with a CUDA GPU and its own torch
# (the H200 machine: Python 3.12, torch 2.11.0+cu130, no network). Run from the repo root:
#
#   tests/stable/gpu_check.sh <dir with the opkiln-*+cu130-cp310-abi3 and +cpu-cp310-abi3 wheels> [<dir of
#                             pytest wheels, used only if the machine's Python has no pytest>]
#
# The wheels are installed as they are (never rebuilt), beside the machine's torch;
# tests/ops then runs against them: all tests (GPU ones included) with the CUDA wheel, the CPU
# tests with the CPU wheel. Logs go to $OUT (or ./gpu-check-out).
set -uo pipefail
wheels=$(cd "$1" && pwd)
extra=${2:-}
out=${OUT:-$PWD/gpu-check-out}
mkdir -p "$out"
python=${PYTHON:-python3}
repo=$PWD
status=0

{ nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader; "$python" -c \
  "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.is_available())"; } \
  2>&1 | tee "$out/machine.txt"

# The wheel goes into a directory of its own on PYTHONPATH, beside whatever environment holds the
# machine's torch (system site-packages or a venv alike).
run_variant() {  # <name> <wheel glob> <pytest -m expression or "">
  local name=$1 pattern=$2 marks=$3 target=/tmp/opkiln-stable-$1
  rm -rf "$target"
  local wheel
  wheel=$(ls "$wheels"/$pattern | head -1)
  "$python" -m pip install -q --no-deps --no-index --target "$target" "$wheel" || return 1
  if ! "$python" -c "import pytest" 2>/dev/null && [ -n "$extra" ]; then
    "$python" -m pip install -q --no-deps --no-index --target "$target" "$extra"/*.whl || return 1
  fi
  export PYTHONPATH=$target
  (cd /tmp && "$python" -c "import json, torch, opkiln; i = opkiln.build_info(); print(json.dumps({
      'wheel': '$(basename "$wheel")', 'torch': torch.__version__, 'abi_mode': i['abi_mode'],
      'torch_min': i['torch_min'], 'built_with': i['torch_version'], 'cuda_archs': i['cuda_archs'],
      'ops': i['ops'], 'file': opkiln._C.__file__}))") 2>&1 | tee "$out/$name-import.txt" || return 1
  local args=(-q -p no:cacheprovider -ra --junitxml "$out/$name-junit.xml" tests/ops)
  [ -n "$marks" ] && args+=(-m "$marks")
  PYTHONPATH=$target "$python" -m pytest "${args[@]}" > "$out/$name-pytest.txt" 2>&1
  local rc=$?
  tail -5 "$out/$name-pytest.txt"
  return $rc
}

echo "== CUDA stable wheel: all of tests/ops"
run_variant cu130 'opkiln-*+cu130-cp310-abi3-*.whl' "" || status=1
echo "== CUDA stable wheel: current stream and CUDA graph capture"
(cd /tmp && PYTHONPATH=/tmp/opkiln-stable-cu130 "$python" - <<'PY') 2>&1 | tee "$out/cu130-streams.txt" || status=1
import torch, opkiln
a, b = torch.randn(1 << 20, device="cuda"), torch.randn(1 << 20, device="cuda")
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    out = opkiln.weighted_sum(a, b, 0.25)
side.synchronize()
torch.testing.assert_close(out, 0.25 * a + 0.75 * b)
# A kernel launched on any stream but the capturing one breaks the capture.
graph = torch.cuda.CUDAGraph()
x, w = torch.randn(64, 1024, device="cuda"), torch.randn(1024, device="cuda")
torch.cuda.synchronize()
with torch.cuda.graph(graph):
    y = opkiln.rms_norm(x, w, 1e-6)
    z = opkiln.weighted_sum(a, b, 0.5)
graph.replay()
torch.cuda.synchronize()
torch.testing.assert_close(y, x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w, atol=1e-5, rtol=1e-5)
torch.testing.assert_close(z, 0.5 * a + 0.5 * b)
print("current stream and graph capture: ok")
PY
echo "== CPU stable wheel: CPU tests of tests/ops"
run_variant cpu 'opkiln-*+cpu-cp310-abi3-*.whl' "not gpu" || status=1
echo "gpu_check: $([ $status -eq 0 ] && echo PASS || echo FAIL)" | tee "$out/result.txt"
exit $status
