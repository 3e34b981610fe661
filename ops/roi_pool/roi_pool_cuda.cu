// RoIPool on CUDA: one thread per output element (forward) or per grad_output element
// (backward, scattering with atomicAdd through common/cuda_scatter.cuh), grid-stride loops.
#include <cfloat>

#include "roi_pool/roi_pool.h"
#include "common/cuda_common.cuh"
#include "common/cuda_scatter.cuh"
#include "roi_pool/roi_pool_bins.h"

namespace opkiln::kernels {
// A named namespace, not an anonymous one: nvcc hashes the absolute source path into
// anonymous-namespace names, which would make the fatbin differ between checkouts.
namespace roi_pool_cu {

using namespace roi_pool_bins;

template <typename T>
struct Kind {
  using C = cuda::Convert<T>;
  using Acc = typename C::Acc;
  // v rounded to T and back: torchvision's bin arithmetic in the storage dtype.
  struct InStorage {
    __device__ Acc operator()(Acc v) const { return C::load(C::store(v)); }
  };
  struct Load {
    __device__ Acc operator()(T v) const { return C::load(v); }
  };
};

template <typename T>
__global__ void roi_pool_forward_kernel(const T* __restrict__ input, const T* __restrict__ rois,
                                        T* __restrict__ output, std::int32_t* __restrict__ argmax, RoiShape s,
                                        std::int64_t total) {
  using K = Kind<T>;
  using Acc = typename K::Acc;
  const typename K::InStorage in_storage;
  cuda::grid_stride(total, [&](std::int64_t i) {
    const PooledIndex at = pooled_index(i, {s.channels, s.pooled_height, s.pooled_width});
    const T* r = rois + at.roi * kRoiColumns;
    const Acc scale = in_storage(static_cast<Acc>(s.spatial_scale));
    const auto scaled = [&](T v) { return in_storage(K::C::load(v) * scale); };
    const Roi<Acc> roi = make_roi<Acc>(K::C::load(r[0]), scaled(r[1]), scaled(r[2]), scaled(r[3]), scaled(r[4]),
                                       Acc(1), s.batch, s.pooled_height, s.pooled_width, in_storage);
    Max<Acc> m{Acc(0), -1};
    if (roi.valid) {
      m = window_max(input + (roi.batch * s.channels + at.channel) * s.height * s.width, s.width,
                     span(at.ph, roi.bin_h, roi.y0, s.height, in_storage),
                     span(at.pw, roi.bin_w, roi.x0, s.width, in_storage), in_storage(-FLT_MAX), typename K::Load{});
    }
    output[i] = K::C::store(m.value);
    argmax[i] = m.index;
  });
}

template <typename T>
__global__ void roi_pool_backward_kernel(const T* __restrict__ grad_output, const T* __restrict__ rois,
                                         const std::int32_t* __restrict__ argmax,
                                         typename cuda::Convert<T>::Acc* __restrict__ target, RoiShape s,
                                         std::int64_t total) {
  using C = cuda::Convert<T>;
  const std::int64_t plane = s.height * s.width;
  cuda::grid_stride(total, [&](std::int64_t i) {
    const std::int32_t a = argmax[i];
    const PooledIndex at = pooled_index(i, {s.channels, s.pooled_height, s.pooled_width});
    const auto b = C::load(rois[at.roi * kRoiColumns]);
    if (a < 0 || a >= plane || !batch_index_valid(b, s.batch)) return;
    atomicAdd(target + (static_cast<std::int64_t>(b) * s.channels + at.channel) * plane + a, C::load(grad_output[i]));
  });
}

}  // namespace roi_pool_cu
using namespace roi_pool_cu;

CudaStatus roi_pool_cuda(ScalarKind kind, const RoiShape& s, const void* input, const void* rois, void* output,
                         std::int32_t* argmax, CudaStream stream) {
  const std::int64_t total = s.rois * s.channels * s.pooled_height * s.pooled_width;
  if (total == 0) return 0;
  return cuda::dispatch_float_kinds(kind, [&]<typename T>() -> CudaStatus {
    roi_pool_forward_kernel<T><<<cuda::grid_for(total), cuda::kThreads, 0, stream>>>(
        static_cast<const T*>(input), static_cast<const T*>(rois), static_cast<T*>(output), argmax, s, total);
    return cuda::last_launch_status();
  });
}

CudaStatus roi_pool_backward_cuda(ScalarKind kind, const RoiShape& s, const void* grad_output, const void* rois,
                                  const std::int32_t* argmax, void* grad_input, void* workspace,
                                  std::size_t workspace_bytes, CudaStream stream) {
  const std::int64_t total = s.rois * s.channels * s.pooled_height * s.pooled_width;
  // One thread per grad_output element adds it at its argmax.
  return cuda::dispatch_scatter_add(kind, grad_input, s.batch * s.channels * s.height * s.width, workspace,
                                    workspace_bytes, stream, [&]<typename T>(auto* target) {
    if (total > 0) {
      roi_pool_backward_kernel<T><<<cuda::grid_for(total), cuda::kThreads, 0, stream>>>(
          static_cast<const T*>(grad_output), static_cast<const T*>(rois), argmax, target, s, total);
    }
  });
}

}  // namespace opkiln::kernels
