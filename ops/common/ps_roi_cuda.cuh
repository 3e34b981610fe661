// The CUDA drivers of the position-sensitive RoI ops (common/ps_roi.h): one thread per output
// element (forward) or per grad_output element (backward, atomicAdd through
// common/cuda_scatter.cuh), grid-stride loops over 64-bit indices. Include it in the op's .cu
// file and instantiate with OPKILN_PS_ROI_CUDA(Op).
#pragma once

#include "common/cuda_common.cuh"
#include "common/cuda_scatter.cuh"
#include "common/ps_roi.h"

namespace opkiln::kernels::ps_roi_cu {

template <typename Op, typename T>
__device__ __forceinline__ auto load_roi(const T* rois, std::int64_t k, const PsRoiGeometry& g) {
  using C = cuda::Convert<T>;
  const T* r = rois + k * kRoiColumns;
  return Op::template roi<typename C::Acc>(C::load(r[0]), C::load(r[1]), C::load(r[2]), C::load(r[3]), C::load(r[4]),
                                           g);
}

template <typename Op, typename T>
__global__ void forward_kernel(const T* __restrict__ input, const T* __restrict__ rois, T* __restrict__ output,
                               std::int32_t* __restrict__ channel_mapping, PsRoiGeometry g, std::int64_t total) {
  using C = cuda::Convert<T>;
  using Acc = typename C::Acc;
  cuda::grid_stride(total, [&](std::int64_t i) {
    const PooledIndex at = pooled_index(i, {g.channels_out, g.pooled_height, g.pooled_width});
    const auto roi = load_roi<Op>(rois, at.roi, g);
    const std::int64_t c_in = ps_input_channel(at.channel, at.ph, at.pw, g);
    Acc v = 0;
    if (roi.valid) {
      const T* p = input + (roi.batch * g.channels + c_in) * g.height * g.width;
      v = Op::forward(roi, at.ph, at.pw, g, [p](std::int64_t o) { return C::load(p[o]); });
    }
    output[i] = C::store(v);
    channel_mapping[i] = static_cast<std::int32_t>(c_in);
  });
}

template <typename Op, typename T>
__global__ void backward_kernel(const T* __restrict__ grad_output, const T* __restrict__ rois,
                                typename cuda::Convert<T>::Acc* __restrict__ target, PsRoiGeometry g,
                                std::int64_t total) {
  using C = cuda::Convert<T>;
  using Acc = typename C::Acc;
  cuda::grid_stride(total, [&](std::int64_t i) {
    const PooledIndex at = pooled_index(i, {g.channels_out, g.pooled_height, g.pooled_width});
    const auto roi = load_roi<Op>(rois, at.roi, g);
    if (!roi.valid) return;
    Acc* p = target + (roi.batch * g.channels + ps_input_channel(at.channel, at.ph, at.pw, g)) * g.height * g.width;
    Op::backward(roi, C::load(grad_output[i]), at.ph, at.pw, g, [p](std::int64_t o, Acc v) { atomicAdd(p + o, v); });
  });
}

}  // namespace opkiln::kernels::ps_roi_cu

namespace opkiln::kernels {

template <typename Op>
CudaStatus ps_roi_forward_cuda(ScalarKind kind, const PsRoiGeometry& g, const void* input, const void* rois,
                               void* output, std::int32_t* channel_mapping, CudaStream stream) {
  const std::int64_t total = g.rois * g.channels_out * g.pooled_height * g.pooled_width;
  if (total == 0) return 0;
  return cuda::dispatch_float_kinds(kind, [&]<typename T>() -> CudaStatus {
    ps_roi_cu::forward_kernel<Op, T><<<cuda::grid_for(total), cuda::kThreads, 0, stream>>>(
        static_cast<const T*>(input), static_cast<const T*>(rois), static_cast<T*>(output), channel_mapping, g, total);
    return cuda::last_launch_status();
  });
}

template <typename Op>
CudaStatus ps_roi_backward_cuda(ScalarKind kind, const PsRoiGeometry& g, const void* grad_output, const void* rois,
                                void* grad_input, void* workspace, std::size_t workspace_bytes, CudaStream stream) {
  const std::int64_t total = g.rois * g.channels_out * g.pooled_height * g.pooled_width;
  return cuda::dispatch_scatter_add(kind, grad_input, g.batch * g.channels * g.height * g.width, workspace,
                                    workspace_bytes, stream, [&]<typename T>(typename cuda::Convert<T>::Acc* target) {
    if (total == 0) return;
    ps_roi_cu::backward_kernel<Op, T><<<cuda::grid_for(total), cuda::kThreads, 0, stream>>>(
        static_cast<const T*>(grad_output), static_cast<const T*>(rois), target, g, total);
  });
}

}  // namespace opkiln::kernels

// The CUDA drivers for one op's per-bin math `Op` (a type in opkiln::kernels).
#define OPKILN_PS_ROI_CUDA(Op)                                                                                   \
  template opkiln::kernels::CudaStatus opkiln::kernels::ps_roi_forward_cuda<opkiln::kernels::Op>(                \
      opkiln::kernels::ScalarKind, const opkiln::kernels::PsRoiGeometry&, const void*, const void*, void*,       \
      std::int32_t*, opkiln::kernels::CudaStream);                                                               \
  template opkiln::kernels::CudaStatus opkiln::kernels::ps_roi_backward_cuda<opkiln::kernels::Op>(               \
      opkiln::kernels::ScalarKind, const opkiln::kernels::PsRoiGeometry&, const void*, const void*, void*, void*, \
      std::size_t, opkiln::kernels::CudaStream)
