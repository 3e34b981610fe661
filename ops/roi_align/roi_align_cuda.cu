// RoIAlign on CUDA: one thread per output element (forward) or per grad_output element
// (backward, scattering with atomicAdd through common/cuda_scatter.cuh), grid-stride loops
// over 64-bit indices.
#include "roi_align/roi_align.h"
#include "common/cuda_common.cuh"
#include "common/cuda_scatter.cuh"
#include "common/roi_sampling.h"

namespace opkiln::kernels {
// A named namespace, not an anonymous one: nvcc hashes the absolute source path into
// anonymous-namespace names, which would make the fatbin differ between checkouts.
namespace roi_align_cu {

struct Shape {
  std::int64_t batch, channels, height, width, pooled_height, pooled_width, sampling_ratio;
  bool aligned;
};

using namespace roi_sampling;

template <typename T>
__device__ __forceinline__ Roi<typename cuda::Convert<T>::Acc> load_roi(const T* r, const Shape& s,
                                                                        typename cuda::Convert<T>::Acc scale) {
  using C = cuda::Convert<T>;
  return make_roi<typename C::Acc>(C::load(r[0]), C::load(r[1]), C::load(r[2]), C::load(r[3]), C::load(r[4]),
                                   scale, s);
}

// The weighted samples of output element `at`: f(plane offset, weight) for each of the four
// taps of every valid sample, in the order torchvision sums them.
template <typename Acc, typename F>
__device__ __forceinline__ void for_each_tap(const Roi<Acc>& roi, const Shape& s, const PooledIndex& at, F&& f) {
  for (std::int64_t iy = 0; iy < roi.grid_h; ++iy) {
    const Acc y = sample_y(roi, at.ph, iy);
    for (std::int64_t ix = 0; ix < roi.grid_w; ++ix) {
      const Sample<Acc> p = bilinear(s.height, s.width, y, sample_x(roi, at.pw, ix));
      if (p.valid) f(p);
    }
  }
}

template <typename T>
__global__ void roi_align_forward_kernel(const T* __restrict__ input, const T* __restrict__ rois,
                                         T* __restrict__ output, Shape s, typename cuda::Convert<T>::Acc scale,
                                         std::int64_t total) {
  using C = cuda::Convert<T>;
  using Acc = typename C::Acc;
  cuda::grid_stride(total, [&](std::int64_t i) {
    const PooledIndex at = pooled_index(i, {s.channels, s.pooled_height, s.pooled_width});
    const Roi<Acc> roi = load_roi(rois + at.roi * kRoiColumns, s, scale);
    Acc sum = 0;
    if (roi.valid) {
      const T* plane = input + (roi.batch * s.channels + at.channel) * s.height * s.width;
      for_each_tap(roi, s, at, [&](const Sample<Acc>& p) {
        sum += p.w1 * C::load(plane[p.o1]) + p.w2 * C::load(plane[p.o2]) + p.w3 * C::load(plane[p.o3]) +
               p.w4 * C::load(plane[p.o4]);
      });
      sum /= roi.count;
    }
    output[i] = C::store(sum);
  });
}

// Acc is float for float/half/bfloat16 (target: grad_input or the float32 workspace) and
// double for double; atomicAdd on float and double is native on sm_60+.
template <typename T>
__global__ void roi_align_backward_kernel(const T* __restrict__ grad_output, const T* __restrict__ rois,
                                          typename cuda::Convert<T>::Acc* __restrict__ target, Shape s,
                                          typename cuda::Convert<T>::Acc scale, std::int64_t total) {
  using C = cuda::Convert<T>;
  using Acc = typename C::Acc;
  cuda::grid_stride(total, [&](std::int64_t i) {
    const PooledIndex at = pooled_index(i, {s.channels, s.pooled_height, s.pooled_width});
    const Roi<Acc> roi = load_roi(rois + at.roi * kRoiColumns, s, scale);
    if (!roi.valid) return;
    const Acc grad = C::load(grad_output[i]) / roi.count;
    Acc* plane = target + (roi.batch * s.channels + at.channel) * s.height * s.width;
    for_each_tap(roi, s, at, [&](const Sample<Acc>& p) {
      atomicAdd(plane + p.o1, grad * p.w1);
      atomicAdd(plane + p.o2, grad * p.w2);
      atomicAdd(plane + p.o3, grad * p.w3);
      atomicAdd(plane + p.o4, grad * p.w4);
    });
  });
}

Shape shape_of(const RoiAlignGeometry& g) {
  return Shape{g.batch, g.channels, g.height, g.width, g.pooled_height, g.pooled_width, g.sampling_ratio, g.aligned};
}

}  // namespace roi_align_cu
using namespace roi_align_cu;

CudaStatus roi_align_forward_cuda(ScalarKind kind, const RoiAlignGeometry& g, const void* input, const void* rois,
                                  void* output, CudaStream stream) {
  const std::int64_t total = g.rois * g.channels * g.pooled_height * g.pooled_width;
  if (total == 0) return 0;
  return cuda::dispatch_float_kinds(kind, [&]<typename T>() -> CudaStatus {
    using Acc = typename cuda::Convert<T>::Acc;
    roi_align_forward_kernel<T><<<cuda::grid_for(total), cuda::kThreads, 0, stream>>>(
        static_cast<const T*>(input), static_cast<const T*>(rois), static_cast<T*>(output), shape_of(g),
        static_cast<Acc>(g.spatial_scale), total);
    return cuda::last_launch_status();
  });
}

CudaStatus roi_align_backward_cuda(ScalarKind kind, const RoiAlignGeometry& g, const void* grad_output,
                                   const void* rois, void* grad_input, void* workspace, std::size_t workspace_bytes,
                                   CudaStream stream) {
  const std::int64_t total = g.rois * g.channels * g.pooled_height * g.pooled_width;
  return cuda::dispatch_scatter_add(kind, grad_input, g.batch * g.channels * g.height * g.width, workspace,
                                    workspace_bytes, stream, [&]<typename T>(typename cuda::Convert<T>::Acc* target) {
    if (total == 0) return;
    roi_align_backward_kernel<T><<<cuda::grid_for(total), cuda::kThreads, 0, stream>>>(
        static_cast<const T*>(grad_output), static_cast<const T*>(rois), target, shape_of(g),
        static_cast<typename cuda::Convert<T>::Acc>(g.spatial_scale), total);
  });
}

}  // namespace opkiln::kernels
