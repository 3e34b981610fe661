#!/usr/bin/env bash
# kiln-layout-cuda-root WHEELS_DIR ROOT: turn NVIDIA's CUDA wheels, installed with
# `pip install --target WHEELS_DIR`, into a toolkit root at ROOT the way CMake's
# FindCUDAToolkit and nvcc expect one:
#   ROOT/{bin,include,lib,nvvm}     merged from nvidia/cu13/ (CUDA 13) or nvidia/*/ (CUDA 12)
#   ROOT/lib64 -> lib
#   ROOT/targets/<arch>-linux/{include,lib} -> ../../{include,lib}
#   ROOT/lib/libcudart.so -> libcudart.so.<major>  (the wheels ship the versioned name only)
set -euo pipefail
wheels=${1:?usage: kiln-layout-cuda-root WHEELS_DIR ROOT}
root=${2:?usage: kiln-layout-cuda-root WHEELS_DIR ROOT}

mkdir -p "$root"
found=0
for component in "$wheels"/nvidia/*/; do
  [[ -d "$component/bin" || -d "$component/include" || -d "$component/lib" ]] || continue
  cp -a "$component". "$root"/
  found=1
done
if [[ $found -eq 0 ]]; then
  echo "kiln-layout-cuda-root: no CUDA component under $wheels/nvidia" >&2
  exit 1
fi
[[ -x "$root/bin/nvcc" ]] || { echo "kiln-layout-cuda-root: no bin/nvcc in $root" >&2; exit 1; }

ln -sfn lib "$root/lib64"
case "$(uname -m)" in
  x86_64) target=x86_64-linux ;;
  aarch64) target=sbsa-linux ;;
  *) echo "kiln-layout-cuda-root: no CUDA target name for $(uname -m)" >&2; exit 1 ;;
esac
mkdir -p "$root/targets/$target"
ln -sfn ../../include "$root/targets/$target/include"
ln -sfn ../../lib "$root/targets/$target/lib"
for versioned in "$root"/lib/libcudart.so.*; do
  [[ -e "$versioned" ]] || continue
  [[ "$versioned" =~ libcudart\.so\.[0-9]+$ ]] || continue
  ln -sfn "$(basename "$versioned")" "$root/lib/libcudart.so"
done
[[ -e "$root/lib/libcudart.so" ]] || { echo "kiln-layout-cuda-root: no libcudart.so.<major> in $root/lib" >&2; exit 1; }
