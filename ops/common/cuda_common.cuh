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

}  // namespace opkiln::kernels::cuda
