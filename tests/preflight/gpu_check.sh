#!/usr/bin/env bash
# The GPU half of tests/preflight, as run on the GPU machine (one H200, torch 2.11.0+cu130, Python 3.12,
# no network). Carry tests/_artifacts/device-wheels (pip download --no-deps --python-version 3.12 of
# scikit-build-core==1.1.2 pyelftools pytest pluggy iniconfig packaging pathspec pygments) with it.
# Builds two one-arch CUDA wheels against the machine's torch (~1 min with 16 cores) and runs
# test_gpu_arch.py: a SASS-only sm_80 wheel must fail on sm_90 with the named error, an sm_80+PTX one must run.
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 -m pip install -q --no-index --no-deps tests/_artifacts/device-wheels/*.whl
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-16}"
python3 -m pytest tests/preflight/test_gpu_arch.py -v -p no:cacheprovider
