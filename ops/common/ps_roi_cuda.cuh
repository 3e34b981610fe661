// The CUDA drivers of the position-sensitive RoI ops (common/ps_roi.h): one thread per output
// element (forward) or per grad_output element (backward, atomicAdd through
// common/cuda_scatter.cuh), grid-stride loops over 64-bit indices. Include it in the op's .cu
// file and instantiate with OPKILN_PS_ROI_CUDA(Op).
#pragma once

#include "common/ps_roi.h"
#include "common/roi_launch.cuh"

namespace opkiln::kernels::ps_roi_cu {

template <typename Op, typename T>
__device__ __forceinline__ auto load_roi(const T* rois, std::int64_t k, const PsRoiGeometry& g) {
  return cuda::load_roi(rois, k, [&](auto... v) { return Op::template roi<typename cuda::Convert<T>::Acc>(v..., g); });
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
  return cuda::launch_forward(kind, g, g.channels_out, input, rois, output, channel_mapping, stream,
                              [](auto t) { return &ps_roi_cu::forward_kernel<Op, typename decltype(t)::type>; });
}

template <typename Op>
CudaStatus ps_roi_backward_cuda(ScalarKind kind, const PsRoiGeometry& g, const void* grad_output, const void* rois,
                                void* grad_input, void* workspace, std::size_t workspace_bytes, CudaStream stream) {
  return cuda::launch_backward(
      kind, g, g.channels_out, grad_output, rois, grad_input, workspace, workspace_bytes, stream,
      [](auto t) { return &ps_roi_cu::backward_kernel<Op, typename decltype(t)::type>; });
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
