// What the CUDA drivers of the RoI homes (common/roi_family_cuda.cuh, common/ps_roi_cuda.cuh) share:
// reading a roi on the device, and the host side of their one-thread-per-element launches (the
// dtype dispatch, the grid, the status; the backward's zeroed accumulation target through
// common/cuda_scatter.cuh).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "common/cuda_common.cuh"
#include "common/cuda_scatter.cuh"
#include "common/roi.h"

namespace opkiln::kernels::cuda {

// make(b, x1, y1, x2, y2) of roi k, the five values as Convert<T>::Acc (make(each of its Columns
// values) of a [K, Columns] rois array).
template <std::int64_t Columns = kRoiColumns, typename T, typename Make>
__device__ __forceinline__ auto load_roi(const T* rois, std::int64_t k, Make&& make) {
  return with_roi<Columns>(rois, k, [](T v) { return Convert<T>::load(v); }, make);
}

// launch.template operator()<T>(blocks) for the storage dtype T of `kind`, with grid_for(total)
// blocks of kThreads (nothing when total is 0); the launch's status.
template <typename Launch>
CudaStatus launch_pooled(ScalarKind kind, std::int64_t total, Launch&& launch) {
  if (total == 0) return 0;
  return dispatch_float_kinds(kind, [&]<typename T>() -> CudaStatus {
    launch.template operator()<T>(grid_for(total));
    return last_launch_status();
  });
}

// The backward's launch into grad_input (numel values), zeroed first, with a float32 workspace
// for 16-bit dtypes (dispatch_scatter_add): launch.template operator()<T>(target, blocks) when
// total > 0.
template <typename Launch>
CudaStatus launch_pooled_scatter(ScalarKind kind, std::int64_t total, void* grad_input, std::int64_t numel,
                                 void* workspace, std::size_t workspace_bytes, CudaStream stream, Launch&& launch) {
  return dispatch_scatter_add(kind, grad_input, numel, workspace, workspace_bytes, stream,
                              [&]<typename T>(typename Convert<T>::Acc* target) {
    if (total == 0) return;
    launch.template operator()<T>(target, grid_for(total));
  });
}

// The launches of a home's kernels, one thread per element of the [K, channels, PH, PW] pooled
// output; kernel(std::type_identity<T>{}) gives the __global__ function for dtype T:
// forward(input, rois, output, index, g, total); backward(grad_output, rois, extra..., target, g,
// total) into grad_input [N, C, H, W] (the geometry's C).
template <typename Geometry, typename Kernel>
CudaStatus launch_forward(ScalarKind kind, const Geometry& g, std::int64_t channels, const void* input,
                          const void* rois, void* output, std::int32_t* index, CudaStream stream, Kernel&& kernel) {
  const std::int64_t total = g.rois * channels * g.pooled_height * g.pooled_width;
  return launch_pooled(kind, total, [&]<typename T>(unsigned blocks) {
    const auto f = kernel(std::type_identity<T>{});
    f<<<blocks, kThreads, 0, stream>>>(static_cast<const T*>(input), static_cast<const T*>(rois),
                                       static_cast<T*>(output), index, g, total);
  });
}

template <typename Geometry, typename Kernel, typename... Extra>
CudaStatus launch_backward(ScalarKind kind, const Geometry& g, std::int64_t channels, const void* grad_output,
                           const void* rois, void* grad_input, void* workspace, std::size_t workspace_bytes,
                           CudaStream stream, Kernel&& kernel, Extra... extra) {
  const std::int64_t total = g.rois * channels * g.pooled_height * g.pooled_width;
  return launch_pooled_scatter(kind, total, grad_input, g.batch * g.channels * g.height * g.width, workspace,
                               workspace_bytes, stream, [&]<typename T>(auto* target, unsigned blocks) {
    const auto f = kernel(std::type_identity<T>{});
    f<<<blocks, kThreads, 0, stream>>>(static_cast<const T*>(grad_output), static_cast<const T*>(rois), extra...,
                                       target, g, total);
  });
}

}  // namespace opkiln::kernels::cuda
