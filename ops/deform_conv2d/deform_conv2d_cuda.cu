// deform_conv2d's CUDA kernel core (deform_conv2d.h): one thread per item, the same per-sample
// math as the CPU core (deform::point, common/bilinear.h); col2im atomically adds into grad_input
// (or its float32 workspace, common/cuda_scatter.cuh).
#include <cstdint>

#include "common/cuda_common.cuh"
#include "common/cuda_scatter.cuh"
#include "deform_conv2d/deform_conv2d.h"

namespace opkiln::kernels {
namespace deform_cu {

using cuda::Convert;
using cuda::grid_for;
using cuda::grid_stride;
using cuda::kThreads;

template <typename T>
using AccOf = typename Convert<T>::Acc;

template <typename T>
struct Loader {
  __device__ AccOf<T> operator()(T v) const { return Convert<T>::load(v); }
};

template <typename T>
__global__ void samples_kernel(const T* offset, const T* mask, DeformGeometry g, bilinear::Sample<AccOf<T>>* table) {
  using Acc = AccOf<T>;
  grid_stride(g.sample_rows() * g.positions(), [&](std::int64_t i) {
    const auto pt = deform::point<Acc>(g, offset, mask, i / g.positions(), i % g.positions(), Loader<T>{});
    table[i] = deform::masked(bilinear::zero_padded<Acc>(g.height, g.width, pt.y, pt.x).sample, pt.mask);
  });
}

// The table row block of image n, channel c: (n * OG + og) * taps * positions.
__device__ __forceinline__ std::int64_t table_base(const DeformGeometry& g, std::int64_t nc) {
  const std::int64_t n = nc / g.channels, c = nc % g.channels;
  return (n * g.offset_groups + c / g.group_channels()) * g.taps() * g.positions();
}

template <typename T>
__global__ void im2col_kernel(const T* input, const bilinear::Sample<AccOf<T>>* table, DeformGeometry g, T* columns) {
  using Acc = AccOf<T>;
  const std::int64_t per_plane = g.taps() * g.positions();
  grid_stride(g.batch * g.channels * per_plane, [&](std::int64_t i) {
    const std::int64_t nc = i / per_plane;
    const T* plane = input + nc * g.plane();
    const auto& s = table[table_base(g, nc) + i % per_plane];
    const auto load = [plane](std::int64_t o) { return bilinear::padded_load(plane, o, Loader<T>{}); };
    columns[i] = Convert<T>::store(s.valid ? bilinear::value(s, load) : Acc(0));
  });
}

template <typename T>
__global__ void col2im_kernel(const T* grad_columns, const bilinear::Sample<AccOf<T>>* table, DeformGeometry g,
                              AccOf<T>* grad_input) {
  using Acc = AccOf<T>;
  const std::int64_t per_plane = g.taps() * g.positions();
  grid_stride(g.batch * g.channels * per_plane, [&](std::int64_t i) {
    const std::int64_t nc = i / per_plane;
    const auto& s = table[table_base(g, nc) + i % per_plane];
    if (!s.valid) return;
    Acc* plane = grad_input + nc * g.plane();
    bilinear::scatter(s, Convert<T>::load(grad_columns[i]), [plane](std::int64_t o, Acc v) {
      if (o != bilinear::kOutside) atomicAdd(plane + o, v);
    });
  });
}

template <typename T>
__global__ void offset_grad_kernel(const T* grad_columns, const T* input, const T* offset, const T* mask,
                                   DeformGeometry g, T* grad_offset, T* grad_mask) {
  using Acc = AccOf<T>;
  const std::int64_t positions = g.positions(), taps = g.taps(), group = g.group_channels();
  grid_stride(g.sample_rows() * positions, [&](std::int64_t i) {
    const std::int64_t row = i / positions, p = i % positions;
    const std::int64_t t = row % taps, n_og = row / taps;
    const std::int64_t n = n_og / g.offset_groups, og = n_og % g.offset_groups;
    const auto pt = deform::point<Acc>(g, offset, mask, row, p, Loader<T>{});
    const auto s = bilinear::zero_padded<Acc>(g.height, g.width, pt.y, pt.x);
    Acc gy = 0, gx = 0, gm = 0;
    for (std::int64_t c = og * group; c < (og + 1) * group; ++c) {
      const T* plane = input + (n * g.channels + c) * g.plane();
      const auto load = [plane](std::int64_t o) { return bilinear::padded_load(plane, o, Loader<T>{}); };
      const Acc v1 = load(s.sample.o1), v2 = load(s.sample.o2), v3 = load(s.sample.o3), v4 = load(s.sample.o4);
      const Acc grad = Convert<T>::load(grad_columns[((n * g.channels + c) * taps + t) * positions + p]);
      gy += grad * (s.dy1 * v1 + s.dy2 * v2 + s.dy3 * v3 + s.dy4 * v4);
      gx += grad * (s.dx1 * v1 + s.dx2 * v2 + s.dx3 * v3 + s.dx4 * v4);
      if (s.sample.valid) gm += grad * (s.sample.w1 * v1 + s.sample.w2 * v2 + s.sample.w3 * v3 + s.sample.w4 * v4);
    }
    T* go = grad_offset + (n * 2 * g.offset_groups * taps + 2 * (og * taps + t)) * positions + p;
    go[0] = Convert<T>::store(pt.mask * gy);
    go[positions] = Convert<T>::store(pt.mask * gx);
    if (g.use_mask) grad_mask[i] = Convert<T>::store(gm);
  });
}

template <typename T>
__global__ void add_bias_kernel(const T* src, const T* bias, std::int64_t channels, std::int64_t plane,
                                std::int64_t numel, T* out) {
  grid_stride(numel, [&](std::int64_t i) {
    const AccOf<T> b = bias != nullptr ? Convert<T>::load(bias[(i / plane) % channels]) : AccOf<T>(0);
    out[i] = Convert<T>::store(Convert<T>::load(src[i]) + b);
  });
}

template <typename T>
__global__ void sum_kernel(const T* src, std::int64_t count, std::int64_t n, bool accumulate, T* dst) {
  grid_stride(n, [&](std::int64_t j) {
    AccOf<T> sum = accumulate ? Convert<T>::load(dst[j]) : AccOf<T>(0);
    for (std::int64_t i = 0; i < count; ++i) sum += Convert<T>::load(src[i * n + j]);
    dst[j] = Convert<T>::store(sum);
  });
}

// One block per channel: its threads sum strided parts, then a shared-memory tree.
template <typename T>
__global__ void bias_grad_kernel(const T* grad, std::int64_t batch, std::int64_t channels, std::int64_t plane,
                                 bool accumulate, T* grad_bias) {
  using Acc = AccOf<T>;
  __shared__ Acc part[kThreads];
  const std::int64_t c = blockIdx.x;
  Acc sum = 0;
  for (std::int64_t i = threadIdx.x; i < batch * plane; i += blockDim.x) {
    sum += Convert<T>::load(grad[((i / plane) * channels + c) * plane + i % plane]);
  }
  part[threadIdx.x] = sum;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) part[threadIdx.x] += part[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) grad_bias[c] = Convert<T>::store(part[0] + (accumulate ? Convert<T>::load(grad_bias[c]) : Acc(0)));
}

}  // namespace deform_cu

using namespace deform_cu;

CudaStatus deform_samples_cuda(ScalarKind kind, const void* offset, const void* mask, const DeformGeometry& g,
                               void* table, CudaStream stream) {
  return cuda::dispatch_float_kinds(kind, [&]<typename T>() -> CudaStatus {
    const std::int64_t n = g.sample_rows() * g.positions();
    if (n == 0) return 0;
    samples_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T*>(offset), static_cast<const T*>(mask),
                                                          g, static_cast<bilinear::Sample<AccOf<T>>*>(table));
    return cuda::last_launch_status();
  });
}

CudaStatus deform_im2col_cuda(ScalarKind kind, const void* input, const void* table, const DeformGeometry& g,
                              void* columns, CudaStream stream) {
  return cuda::dispatch_float_kinds(kind, [&]<typename T>() -> CudaStatus {
    const std::int64_t n = g.batch * g.channels * g.taps() * g.positions();
    if (n == 0) return 0;
    im2col_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(
        static_cast<const T*>(input), static_cast<const bilinear::Sample<AccOf<T>>*>(table), g, static_cast<T*>(columns));
    return cuda::last_launch_status();
  });
}

CudaStatus deform_col2im_cuda(ScalarKind kind, const void* grad_columns, const void* table, const DeformGeometry& g,
                              void* grad_input, void* workspace, std::size_t workspace_bytes, CudaStream stream) {
  const std::int64_t numel = g.batch * g.channels * g.plane();
  return cuda::dispatch_scatter_add(kind, grad_input, numel, workspace, workspace_bytes, stream,
                                    [&]<typename T>(AccOf<T>* target) {
    const std::int64_t n = g.batch * g.channels * g.taps() * g.positions();
    if (n == 0) return;
    col2im_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(
        static_cast<const T*>(grad_columns), static_cast<const bilinear::Sample<AccOf<T>>*>(table), g, target);
  });
}

CudaStatus deform_offset_grad_cuda(ScalarKind kind, const void* grad_columns, const void* input, const void* offset,
                                   const void* mask, const DeformGeometry& g, void* grad_offset, void* grad_mask,
                                   CudaStream stream) {
  return cuda::dispatch_float_kinds(kind, [&]<typename T>() -> CudaStatus {
    const std::int64_t n = g.sample_rows() * g.positions();
    if (n == 0) return 0;
    offset_grad_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(
        static_cast<const T*>(grad_columns), static_cast<const T*>(input), static_cast<const T*>(offset),
        static_cast<const T*>(mask), g, static_cast<T*>(grad_offset), static_cast<T*>(grad_mask));
    return cuda::last_launch_status();
  });
}

CudaStatus deform_add_bias_cuda(ScalarKind kind, const void* src, const void* bias, std::int64_t channels,
                                std::int64_t plane, std::int64_t numel, void* out, CudaStream stream) {
  return cuda::dispatch_float_kinds(kind, [&]<typename T>() -> CudaStatus {
    if (numel == 0) return 0;
    add_bias_kernel<T><<<grid_for(numel), kThreads, 0, stream>>>(static_cast<const T*>(src),
                                                               static_cast<const T*>(bias), channels, plane, numel,
                                                               static_cast<T*>(out));
    return cuda::last_launch_status();
  });
}

CudaStatus deform_sum_cuda(ScalarKind kind, const void* src, std::int64_t count, std::int64_t n, bool accumulate,
                           void* dst, CudaStream stream) {
  return cuda::dispatch_float_kinds(kind, [&]<typename T>() -> CudaStatus {
    if (n == 0) return 0;
    sum_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T*>(src), count, n, accumulate,
                                                        static_cast<T*>(dst));
    return cuda::last_launch_status();
  });
}

CudaStatus deform_bias_grad_cuda(ScalarKind kind, const void* grad, std::int64_t batch, std::int64_t channels,
                                 std::int64_t plane, bool accumulate, void* grad_bias, CudaStream stream) {
  return cuda::dispatch_float_kinds(kind, [&]<typename T>() -> CudaStatus {
    if (channels == 0) return 0;
    bias_grad_kernel<T><<<static_cast<unsigned>(channels), kThreads, 0, stream>>>(
        static_cast<const T*>(grad), batch, channels, plane, accumulate, static_cast<T*>(grad_bias));
    return cuda::last_launch_status();
  });
}

}  // namespace opkiln::kernels
