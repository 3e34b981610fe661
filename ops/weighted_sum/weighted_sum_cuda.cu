// Bandwidth-bound: each thread moves 16-byte vectors with streaming
// (evict-first) loads and stores, several in flight, so the kernel runs at
// copy speed.
#include "weighted_sum/weighted_sum.h"
#include "common/cuda_common.cuh"

namespace opkiln::kernels {
// A named namespace, not an anonymous one: nvcc hashes the absolute source path into
// anonymous-namespace names, which would make the fatbin differ between checkouts.
namespace weighted_sum_cu {

template <typename T>
struct alignas(16) Vec16 {
  static constexpr int kLanes = 16 / sizeof(T);
  T v[kLanes];
};

// One tile = kUnroll * blockDim.x vectors; a thread issues all its loads of a
// tile before it computes, so each thread has 2 * kUnroll 16-byte loads in
// flight. One tile per block normally (grid-stride only past the grid limit).
constexpr int kUnroll = 4;

template <typename T, typename Acc>
__global__ void weighted_sum_vec_kernel(const Vec16<T>* __restrict__ a, const Vec16<T>* __restrict__ b,
                                        Vec16<T>* __restrict__ out, std::int64_t n_vec, Acc wa, Acc wb) {
  using C = cuda::Convert<T>;
  const std::int64_t tile = static_cast<std::int64_t>(kUnroll) * blockDim.x;
  for (std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * tile + threadIdx.x; base < n_vec;
       base += static_cast<std::int64_t>(gridDim.x) * tile) {
    Vec16<T> va[kUnroll];
    Vec16<T> vb[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const std::int64_t i = base + static_cast<std::int64_t>(u) * blockDim.x;
      if (i < n_vec) {
        *reinterpret_cast<int4*>(&va[u]) = __ldcs(reinterpret_cast<const int4*>(a + i));
        *reinterpret_cast<int4*>(&vb[u]) = __ldcs(reinterpret_cast<const int4*>(b + i));
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const std::int64_t i = base + static_cast<std::int64_t>(u) * blockDim.x;
      if (i < n_vec) {
        Vec16<T> vo;
#pragma unroll
        for (int k = 0; k < Vec16<T>::kLanes; ++k) {
          vo.v[k] = C::store(wa * C::load(va[u].v[k]) + wb * C::load(vb[u].v[k]));
        }
        __stcs(reinterpret_cast<int4*>(out + i), *reinterpret_cast<const int4*>(&vo));
      }
    }
  }
}

template <typename T, typename Acc>
__global__ void weighted_sum_scalar_kernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out,
                                           std::int64_t begin, std::int64_t n, Acc wa, Acc wb) {
  using C = cuda::Convert<T>;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = begin + static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = C::store(wa * C::load(a[i]) + wb * C::load(b[i]));
  }
}

constexpr std::int64_t kMaxGrid = 0x7fffffff;

bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

}  // namespace weighted_sum_cu
using namespace weighted_sum_cu;
CudaStatus weighted_sum_cuda(ScalarKind kind, const void* a, const void* b, void* out, std::int64_t n,
                             double alpha, CudaStream stream) {
  if (n == 0) return 0;
  return cuda::dispatch_float_kinds(kind, [&]<typename T>() -> CudaStatus {
    using Acc = typename cuda::Convert<T>::Acc;
    const Acc wa = static_cast<Acc>(alpha);
    const Acc wb = static_cast<Acc>(1.0 - alpha);
    constexpr int kThreads = 256;
    const std::int64_t max_blocks = static_cast<std::int64_t>(cuda::sm_count()) * 8;  // scalar path
    std::int64_t vec_elems = 0;
    if (aligned16(a) && aligned16(b) && aligned16(out)) {
      constexpr int lanes = Vec16<T>::kLanes;
      const std::int64_t n_vec = n / lanes;
      if (n_vec > 0) {
        const std::int64_t tile = static_cast<std::int64_t>(kThreads) * kUnroll;
        const std::int64_t blocks = std::min<std::int64_t>((n_vec + tile - 1) / tile, kMaxGrid);
        weighted_sum_vec_kernel<T, Acc><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
            static_cast<const Vec16<T>*>(a), static_cast<const Vec16<T>*>(b), static_cast<Vec16<T>*>(out), n_vec, wa, wb);
      }
      vec_elems = n_vec * lanes;
    }
    if (vec_elems < n) {
      const std::int64_t rest = n - vec_elems;
      const std::int64_t blocks = std::min<std::int64_t>((rest + kThreads - 1) / kThreads, max_blocks);
      weighted_sum_scalar_kernel<T, Acc><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
          static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(out), vec_elems, n, wa, wb);
    }
    return cuda::last_launch_status();
  });
}

}  // namespace opkiln::kernels
