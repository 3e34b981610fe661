// RoIAlign on CUDA: one thread per output element (forward) or per grad_output element
// (backward, scattering with atomicAdd), grid-stride loops over 64-bit indices.
#include "roi_align/roi_align.h"
#include "common/cuda_common.cuh"
#include "roi_align/roi_align_sampling.h"

#include <type_traits>

namespace opkiln::kernels {
// A named namespace, not an anonymous one: nvcc hashes the absolute source path into
// anonymous-namespace names, which would make the fatbin differ between checkouts.
namespace roi_align_cu {

constexpr int kThreads = 256;

struct Shape {
  std::int64_t batch, channels, height, width, pooled_height, pooled_width, sampling_ratio;
  bool aligned;
};

using namespace roi_align_sampling;

template <typename T>
__device__ __forceinline__ Roi<typename cuda::Convert<T>::Acc> load_roi(const T* r, const Shape& s,
                                                                        typename cuda::Convert<T>::Acc scale) {
  using C = cuda::Convert<T>;
  return make_roi<typename C::Acc>(C::load(r[0]), C::load(r[1]), C::load(r[2]), C::load(r[3]), C::load(r[4]),
                                   scale, s);
}

// Where element i of the [K, C, PH, PW] output (or output gradient) lies.
struct OutputIndex {
  std::int64_t k, c, ph, pw;
};

__device__ __forceinline__ OutputIndex output_index(std::int64_t i, const Shape& s) {
  const std::int64_t bins = s.pooled_width * s.pooled_height;
  return {i / (bins * s.channels), (i / bins) % s.channels, (i / s.pooled_width) % s.pooled_height,
          i % s.pooled_width};
}

template <typename T>
__global__ void roi_align_forward_kernel(const T* __restrict__ input, const T* __restrict__ rois,
                                         T* __restrict__ output, Shape s, typename cuda::Convert<T>::Acc scale,
                                         std::int64_t total) {
  using C = cuda::Convert<T>;
  using Acc = typename C::Acc;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const OutputIndex at = output_index(i, s);
    const std::int64_t pw = at.pw, ph = at.ph, c = at.c;
    const Roi<Acc> roi = load_roi(rois + at.k * 5, s, scale);
    Acc sum = 0;
    if (roi.valid) {
      const T* plane = input + (roi.batch * s.channels + c) * s.height * s.width;
      for (std::int64_t iy = 0; iy < roi.grid_h; ++iy) {
        const Acc y = sample_y(roi, ph, iy);
        for (std::int64_t ix = 0; ix < roi.grid_w; ++ix) {
          const Sample<Acc> p = bilinear(s.height, s.width, y, sample_x(roi, pw, ix));
          if (p.valid) {
            sum += p.w1 * C::load(plane[p.o1]) + p.w2 * C::load(plane[p.o2]) + p.w3 * C::load(plane[p.o3]) +
                   p.w4 * C::load(plane[p.o4]);
          }
        }
      }
      sum /= roi.count;
    }
    output[i] = C::store(sum);
  }
}

// Acc is float for float/half/bfloat16 (target: grad_input or the float32 workspace) and
// double for double; atomicAdd on float and double is native on sm_60+.
template <typename T>
__global__ void roi_align_backward_kernel(const T* __restrict__ grad_output, const T* __restrict__ rois,
                                          typename cuda::Convert<T>::Acc* __restrict__ target, Shape s,
                                          typename cuda::Convert<T>::Acc scale, std::int64_t total) {
  using C = cuda::Convert<T>;
  using Acc = typename C::Acc;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const OutputIndex at = output_index(i, s);
    const std::int64_t pw = at.pw, ph = at.ph, c = at.c;
    const Roi<Acc> roi = load_roi(rois + at.k * 5, s, scale);
    if (!roi.valid) continue;
    const Acc grad = C::load(grad_output[i]) / roi.count;
    Acc* plane = target + (roi.batch * s.channels + c) * s.height * s.width;
    for (std::int64_t iy = 0; iy < roi.grid_h; ++iy) {
      const Acc y = sample_y(roi, ph, iy);
      for (std::int64_t ix = 0; ix < roi.grid_w; ++ix) {
        const Sample<Acc> p = bilinear(s.height, s.width, y, sample_x(roi, pw, ix));
        if (p.valid) {
          atomicAdd(plane + p.o1, grad * p.w1);
          atomicAdd(plane + p.o2, grad * p.w2);
          atomicAdd(plane + p.o3, grad * p.w3);
          atomicAdd(plane + p.o4, grad * p.w4);
        }
      }
    }
  }
}

template <typename T>
__global__ void round_into(const float* __restrict__ src, T* __restrict__ dst, std::int64_t n) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    dst[i] = cuda::Convert<T>::store(src[i]);
  }
}

template <typename T>
__global__ void first_bad_roi_kernel(const T* __restrict__ rois, std::int64_t num_rois, std::int64_t batch,
                                     unsigned long long* __restrict__ first) {
  using C = cuda::Convert<T>;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < num_rois; k += stride) {
    if (!batch_index_valid(C::load(rois[k * 5]), batch)) atomicMin(first, static_cast<unsigned long long>(k));
  }
}

Shape shape_of(const RoiAlignGeometry& g) {
  return Shape{g.batch, g.channels, g.height, g.width, g.pooled_height, g.pooled_width, g.sampling_ratio, g.aligned};
}

unsigned grid_for(std::int64_t n) {
  const std::int64_t max_blocks = static_cast<std::int64_t>(cuda::sm_count()) * 16;
  return static_cast<unsigned>(std::max<std::int64_t>(1, std::min<std::int64_t>((n + kThreads - 1) / kThreads,
                                                                               max_blocks)));
}

bool is_16bit(ScalarKind kind) { return kind == ScalarKind::Float16 || kind == ScalarKind::BFloat16; }

std::int64_t input_numel(const RoiAlignGeometry& g) { return g.batch * g.channels * g.height * g.width; }

}  // namespace roi_align_cu
using namespace roi_align_cu;

CudaStatus roi_align_first_bad_roi_cuda(ScalarKind kind, const void* rois, std::int64_t num_rois,
                                        std::int64_t batch, void* workspace, std::int64_t* first_bad,
                                        CudaStream stream) {
  *first_bad = -1;
  if (num_rois <= 0) return 0;
  auto* first = static_cast<unsigned long long*>(workspace);
  if (const cudaError_t e = cudaMemsetAsync(first, 0xff, sizeof *first, stream); e != cudaSuccess) return e;
  const CudaStatus launched = cuda::dispatch_float_kinds(kind, [&]<typename T>() -> CudaStatus {
    first_bad_roi_kernel<T><<<grid_for(num_rois), kThreads, 0, stream>>>(static_cast<const T*>(rois), num_rois,
                                                                          batch, first);
    return cuda::last_launch_status();
  });
  if (launched != 0) return launched;
  unsigned long long host = 0;
  if (const cudaError_t e = cudaMemcpyAsync(&host, first, sizeof host, cudaMemcpyDeviceToHost, stream);
      e != cudaSuccess) {
    return e;
  }
  if (const cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess) return e;
  *first_bad = host == ~0ull ? -1 : static_cast<std::int64_t>(host);
  return 0;
}

CudaStatus roi_align_forward_cuda(ScalarKind kind, const RoiAlignGeometry& g, const void* input, const void* rois,
                                  void* output, CudaStream stream) {
  const std::int64_t total = g.rois * g.channels * g.pooled_height * g.pooled_width;
  if (total == 0) return 0;
  return cuda::dispatch_float_kinds(kind, [&]<typename T>() -> CudaStatus {
    using Acc = typename cuda::Convert<T>::Acc;
    roi_align_forward_kernel<T><<<grid_for(total), kThreads, 0, stream>>>(
        static_cast<const T*>(input), static_cast<const T*>(rois), static_cast<T*>(output), shape_of(g),
        static_cast<Acc>(g.spatial_scale), total);
    return cuda::last_launch_status();
  });
}

std::size_t roi_align_backward_cuda_workspace_bytes(ScalarKind kind, const RoiAlignGeometry& g) {
  return is_16bit(kind) ? static_cast<std::size_t>(input_numel(g)) * sizeof(float) : 0;
}

CudaStatus roi_align_backward_cuda(ScalarKind kind, const RoiAlignGeometry& g, const void* grad_output,
                                   const void* rois, void* grad_input, void* workspace, std::size_t workspace_bytes,
                                   CudaStream stream) {
  const std::int64_t numel = input_numel(g);
  if (numel == 0) return 0;
  const bool via_workspace = is_16bit(kind);
  if (via_workspace && workspace_bytes < static_cast<std::size_t>(numel) * sizeof(float)) {
    return static_cast<CudaStatus>(cudaErrorInvalidValue);
  }
  void* target = via_workspace ? workspace : grad_input;
  const std::size_t target_bytes =
      static_cast<std::size_t>(numel) * (kind == ScalarKind::Float64 ? sizeof(double) : sizeof(float));
  if (const cudaError_t e = cudaMemsetAsync(target, 0, target_bytes, stream); e != cudaSuccess) return e;
  const std::int64_t total = g.rois * g.channels * g.pooled_height * g.pooled_width;
  return cuda::dispatch_float_kinds(kind, [&]<typename T>() -> CudaStatus {
    using Acc = typename cuda::Convert<T>::Acc;
    if (total > 0) {
      roi_align_backward_kernel<T><<<grid_for(total), kThreads, 0, stream>>>(
          static_cast<const T*>(grad_output), static_cast<const T*>(rois), static_cast<Acc*>(target), shape_of(g),
          static_cast<Acc>(g.spatial_scale), total);
    }
    if constexpr (!std::is_same_v<T, Acc>) {
      round_into<T><<<grid_for(numel), kThreads, 0, stream>>>(static_cast<const float*>(workspace),
                                                                static_cast<T*>(grad_input), numel);
    }
    return cuda::last_launch_status();
  });
}

}  // namespace opkiln::kernels
