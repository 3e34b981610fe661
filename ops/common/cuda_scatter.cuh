// The 16-bit workspace of a scatter-add backward (a kernel that atomicAdds into grad_input):
// float32/float64 add natively into grad_input; float16/bfloat16 add into a float32 workspace
// that is rounded into grad_input once (native half atomics would round at every add).
// The binding allocates scatter_workspace_bytes(kind, numel) device bytes (common/common.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "common/cuda_common.cuh"

namespace opkiln::kernels::cuda {

template <typename T>
__global__ void round_into(const float* __restrict__ src, T* __restrict__ dst, std::int64_t n) {
  grid_stride(n, [&](std::int64_t i) { dst[i] = Convert<T>::store(src[i]); });
}

// Zeroes the accumulation target of grad_input's numel elements on `stream` (grad_input itself, or
// the workspace), calls launch(target) to queue the scatter kernels into it, then rounds the
// workspace into grad_input. cudaErrorInvalidValue when a 16-bit workspace is too small.
template <typename T, typename Launch>
CudaStatus scatter_add(T* grad_input, std::int64_t numel, void* workspace, std::size_t workspace_bytes,
                       CudaStream stream, Launch&& launch) {
  using Acc = typename Convert<T>::Acc;
  constexpr bool kDirect = std::is_same_v<T, Acc>;
  if (numel == 0) return 0;
  if (!kDirect && workspace_bytes < static_cast<std::size_t>(numel) * sizeof(float)) {
    return static_cast<CudaStatus>(cudaErrorInvalidValue);
  }
  Acc* target = nullptr;
  if constexpr (kDirect) {
    target = grad_input;
  } else {
    target = static_cast<Acc*>(workspace);
  }
  if (const cudaError_t e = cudaMemsetAsync(target, 0, static_cast<std::size_t>(numel) * sizeof(Acc), stream);
      e != cudaSuccess) {
    return e;
  }
  launch(target);
  if constexpr (!kDirect) {
    round_into<T><<<grid_for(numel), kThreads, 0, stream>>>(target, grad_input, numel);
  }
  return last_launch_status();
}

// scatter_add in the storage type of `kind`: launch.template operator()<T>(target) queues the
// scatter kernels into the accumulation target.
template <typename Launch>
CudaStatus dispatch_scatter_add(ScalarKind kind, void* grad_input, std::int64_t numel, void* workspace,
                                std::size_t workspace_bytes, CudaStream stream, Launch&& launch) {
  return dispatch_float_kinds(kind, [&]<typename T>() -> CudaStatus {
    return scatter_add(static_cast<T*>(grad_input), numel, workspace, workspace_bytes, stream,
                       [&](typename Convert<T>::Acc* target) { launch.template operator()<T>(target); });
  });
}

}  // namespace opkiln::kernels::cuda
