// Helpers shared by the CUDA kernel cores (no torch headers).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common.h"

namespace opkiln::kernels::cuda {

template <typename T> struct Convert;
template <> struct Convert<float> {
  using Acc = float;
  __device__ static float load(float v) { return v; }
  __device__ static float store(float v) { return v; }
};
template <> struct Convert<double> {
  using Acc = double;
  __device__ static double load(double v) { return v; }
  __device__ static double store(double v) { return v; }
};
template <> struct Convert<__half> {
  using Acc = float;
  __device__ static float load(__half v) { return __half2float(v); }
  __device__ static __half store(float v) { return __float2half_rn(v); }
};
template <> struct Convert<__nv_bfloat16> {
  using Acc = float;
  __device__ static float load(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 store(float v) { return __float2bfloat16_rn(v); }
};

template <typename F>
CudaStatus dispatch_float_kinds(ScalarKind kind, F&& f) {
  switch (kind) {
    case ScalarKind::Float32: return f.template operator()<float>();
    case ScalarKind::Float64: return f.template operator()<double>();
    case ScalarKind::Float16: return f.template operator()<__half>();
    case ScalarKind::BFloat16: return f.template operator()<__nv_bfloat16>();
  }
  return static_cast<CudaStatus>(cudaErrorInvalidValue);
}

inline int sm_count() {
  int device = 0;
  int count = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 108;
  if (cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) return 108;
  return count;
}

inline CudaStatus last_launch_status() { return static_cast<CudaStatus>(cudaGetLastError()); }

// Launch shape of the one-thread-per-item kernels: kThreads a block, at most 16 blocks an SM
// (a grid-stride loop covers the rest).
constexpr int kThreads = 256;

inline unsigned grid_for(std::int64_t n) {
  const std::int64_t max_blocks = static_cast<std::int64_t>(sm_count()) * 16;
  return static_cast<unsigned>(
      std::max<std::int64_t>(1, std::min<std::int64_t>((n + kThreads - 1) / kThreads, max_blocks)));
}

// f(i) for every i in [0, n) that this thread owns: a grid-stride loop over 64-bit indices.
template <typename F>
__device__ __forceinline__ void grid_stride(std::int64_t n, F&& f) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) f(i);
}

}  // namespace opkiln::kernels::cuda
