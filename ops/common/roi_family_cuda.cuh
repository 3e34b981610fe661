// The CUDA drivers of the RoI family (common/roi_family.h): one thread per output element
// (forward) or per grad_output element (backward, atomicAdd through common/cuda_scatter.cuh),
// grid-stride loops over 64-bit indices. Include it in the op's .cu file and instantiate with
// OPKILN_ROI_FAMILY_CUDA(Op).
#pragma once

#include "common/roi_family.h"
#include "common/roi_launch.cuh"

// A named namespace, not an anonymous one: nvcc hashes the absolute source path into
// anonymous-namespace names, which would make the fatbin differ between checkouts.
namespace opkiln::kernels::roi_family_cu {

template <typename T>
struct InStorage {
  using C = cuda::Convert<T>;
  __device__ typename C::Acc operator()(typename C::Acc v) const { return C::load(C::store(v)); }
};

template <typename Op, typename T>
__device__ __forceinline__ auto load_roi(const T* rois, std::int64_t k, const RoiGeometry<Op>& g) {
  return cuda::load_roi<kBoxColumns<Op>>(rois, k, [&](auto... v) {
    return Op::template roi<typename cuda::Convert<T>::Acc>(v..., g, InStorage<T>{});
  });
}

template <typename Op, typename T>
__global__ void forward_kernel(const T* __restrict__ input, const T* __restrict__ rois, T* __restrict__ output,
                               std::int32_t* __restrict__ index, RoiGeometry<Op> g, std::int64_t total) {
  using C = cuda::Convert<T>;
  using Acc = typename C::Acc;
  cuda::grid_stride(total, [&](std::int64_t i) {
    const PooledIndex at = pooled_index(i, {g.channels, g.pooled_height, g.pooled_width});
    const auto roi = load_roi<Op>(rois, at.roi, g);
    RoiValue<Acc> v{Acc(0), -1};
    if (roi.valid) {
      const T* p = input + (roi.batch * g.channels + at.channel) * g.height * g.width;
      const auto load = [p](std::int64_t o) { return C::load(p[o]); };
      auto state = Op::start(roi);
      Op::taps(roi, at.ph, at.pw, g, InStorage<T>{}, [&](const auto& t) { Op::fold(state, t, load); });
      v = Op::finish(roi, state);
    }
    output[i] = C::store(v.value);
    if constexpr (Op::kIndex) index[i] = v.index;
  });
}

// Acc is float for float/half/bfloat16 (target: grad_input or the float32 workspace) and
// double for double; atomicAdd on float and double is native on sm_60+.
template <typename Op, typename T>
__global__ void backward_kernel(const T* __restrict__ grad_output, const T* __restrict__ rois,
                                const std::int32_t* __restrict__ index,
                                typename cuda::Convert<T>::Acc* __restrict__ target, RoiGeometry<Op> g,
                                std::int64_t total) {
  using C = cuda::Convert<T>;
  using Acc = typename C::Acc;
  const std::int64_t plane = g.height * g.width;
  cuda::grid_stride(total, [&](std::int64_t i) {
    const PooledIndex at = pooled_index(i, {g.channels, g.pooled_height, g.pooled_width});
    const auto roi = load_roi<Op>(rois, at.roi, g);
    if (!roi.valid) return;
    Acc* p = target + (roi.batch * g.channels + at.channel) * plane;
    if constexpr (Op::kIndex) {
      const std::int32_t a = index[i];
      if (a >= 0 && a < plane) atomicAdd(p + a, C::load(grad_output[i]));
    } else {
      const Acc grad = Op::grad(roi, C::load(grad_output[i]));
      Op::taps(roi, at.ph, at.pw, g, InStorage<T>{}, [&](const auto& t) {
        Op::scatter(t, grad, [p](std::int64_t o, Acc v) { atomicAdd(p + o, v); });
      });
    }
  });
}

}  // namespace opkiln::kernels::roi_family_cu

namespace opkiln::kernels {

template <typename Op>
CudaStatus roi_family_forward_cuda(ScalarKind kind, const RoiGeometry<Op>& g, const void* input, const void* rois,
                                   void* output, std::int32_t* index, CudaStream stream) {
  return cuda::launch_forward(kind, g, g.channels, input, rois, output, index, stream,
                              [](auto t) { return &roi_family_cu::forward_kernel<Op, typename decltype(t)::type>; });
}

template <typename Op>
CudaStatus roi_family_backward_cuda(ScalarKind kind, const RoiGeometry<Op>& g, const void* grad_output,
                                    const void* rois, const std::int32_t* index, void* grad_input, void* workspace,
                                    std::size_t workspace_bytes, CudaStream stream) {
  return cuda::launch_backward(
      kind, g, g.channels, grad_output, rois, grad_input, workspace, workspace_bytes, stream,
      [](auto t) { return &roi_family_cu::backward_kernel<Op, typename decltype(t)::type>; }, index);
}

}  // namespace opkiln::kernels

// The CUDA drivers for one op's per-bin math `Op` (a type in opkiln::kernels).
#define OPKILN_ROI_FAMILY_CUDA(Op)                                                                                     \
  template opkiln::kernels::CudaStatus opkiln::kernels::roi_family_forward_cuda<opkiln::kernels::Op>(                  \
      opkiln::kernels::ScalarKind, const opkiln::kernels::RoiGeometry<opkiln::kernels::Op>&, const void*,              \
      const void*, void*, std::int32_t*, opkiln::kernels::CudaStream);                                                 \
  template opkiln::kernels::CudaStatus opkiln::kernels::roi_family_backward_cuda<opkiln::kernels::Op>(                 \
      opkiln::kernels::ScalarKind, const opkiln::kernels::RoiGeometry<opkiln::kernels::Op>&, const void*,              \
      const void*, const std::int32_t*, void*, void*, std::size_t, opkiln::kernels::CudaStream)
