// RMSNorm, one CUDA block per row.
//
// Fast path ("cached"): cols is a multiple of the 16-byte pack width and every
// pointer is 16-byte aligned; each thread holds up to kVecs packs of its row
// in registers, so x is read from memory once (forward and backward), and the
// backward keeps its dw partial sums and its slice of w in registers across
// the rows it visits (the same columns in every row). Otherwise ("looped"):
// element-wise loops that read the row twice, for any width and alignment.
//
// dw: each backward block owns one Acc row of the workspace; a second kernel
// sums those rows in a fixed order (deterministic, no atomics).
#include "rms_norm/rms_norm.h"
#include "common/cuda_common.cuh"
#include "common/row_reduce_cuda.cuh"

namespace opkiln::kernels {
// A named namespace, not an anonymous one: nvcc hashes the absolute source path into
// anonymous-namespace names, which would make the fatbin differ between checkouts.
namespace rms_norm_cu {

template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

template <typename T>
constexpr int kPack = 16 / static_cast<int>(sizeof(T));

// Streaming (evict-first) 16-byte loads and stores for data touched once; w,
// read by every row, keeps the default caching.
template <typename P>
__device__ __forceinline__ P load_once(const P* p) {
  static_assert(sizeof(P) == 16 && alignof(P) == 16);
  P out;
  *reinterpret_cast<int4*>(&out) = __ldcs(reinterpret_cast<const int4*>(p));
  return out;
}

template <typename P>
__device__ __forceinline__ void store_once(P* p, const P& v) {
  static_assert(sizeof(P) == 16 && alignof(P) == 16);
  __stcs(reinterpret_cast<int4*>(p), *reinterpret_cast<const int4*>(&v));
}

// Sum over the block (blockDim.x a multiple of 32), the same value in every thread: the row-wise
// home's (common/row_reduce_cuda.cuh), which this kernel's was.
using row_reduce_cu::block_sum;

template <typename Acc>
__device__ __forceinline__ Acc inv_rms(Acc sum_sq, std::int64_t cols, Acc eps) {
  const Acc mean = cols > 0 ? sum_sq / static_cast<Acc>(cols) : Acc(0);
  return Acc(1) / sqrt(mean + eps);
}

// ---------------------------------------------------------------------------- forward

template <typename T, int kVecs>
__global__ void __launch_bounds__(512)
    rms_forward_cached(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                       typename cuda::Convert<T>::Acc* __restrict__ rstd, std::int64_t rows, std::int64_t cols,
                       typename cuda::Convert<T>::Acc eps) {
  using C = cuda::Convert<T>;
  using Acc = typename C::Acc;
  constexpr int L = kPack<T>;
  using P = Pack<T, L>;
  __shared__ Acc scratch[32];
  const std::int64_t nvec = cols / L;
  const P* wv = reinterpret_cast<const P*>(w);
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const P* xr = reinterpret_cast<const P*>(x + row * cols);
    P xv[kVecs];
    Acc ss = 0;
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      const std::int64_t j = threadIdx.x + static_cast<std::int64_t>(k) * blockDim.x;
      if (j < nvec) {
        xv[k] = load_once(xr + j);
#pragma unroll
        for (int l = 0; l < L; ++l) {
          const Acc a = C::load(xv[k].v[l]);
          ss += a * a;
        }
      }
    }
    const Acc inv = inv_rms(block_sum(ss, scratch), cols, eps);
    if (threadIdx.x == 0) rstd[row] = inv;
    P* yr = reinterpret_cast<P*>(y + row * cols);
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      const std::int64_t j = threadIdx.x + static_cast<std::int64_t>(k) * blockDim.x;
      if (j < nvec) {
        const P wk = wv[j];
        P out;
#pragma unroll
        for (int l = 0; l < L; ++l) out.v[l] = C::store(C::load(xv[k].v[l]) * inv * C::load(wk.v[l]));
        store_once(yr + j, out);
      }
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(1024)
    rms_forward_looped(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                       typename cuda::Convert<T>::Acc* __restrict__ rstd, std::int64_t rows, std::int64_t cols,
                       typename cuda::Convert<T>::Acc eps) {
  using C = cuda::Convert<T>;
  using Acc = typename C::Acc;
  __shared__ Acc scratch[32];
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * cols;
    Acc ss = 0;
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const Acc a = C::load(xr[c]);
      ss += a * a;
    }
    const Acc inv = inv_rms(block_sum(ss, scratch), cols, eps);
    if (threadIdx.x == 0) rstd[row] = inv;
    T* yr = y + row * cols;
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = C::store(C::load(xr[c]) * inv * C::load(w[c]));
  }
}

// ---------------------------------------------------------------------------- backward

template <typename T, int kVecs>
__global__ void __launch_bounds__(512)
    rms_backward_cached(const T* __restrict__ g, const T* __restrict__ x, const T* __restrict__ w,
                        const typename cuda::Convert<T>::Acc* __restrict__ rstd, T* __restrict__ dx,
                        typename cuda::Convert<T>::Acc* __restrict__ partial, std::int64_t rows, std::int64_t cols) {
  using C = cuda::Convert<T>;
  using Acc = typename C::Acc;
  constexpr int L = kPack<T>;
  using P = Pack<T, L>;
  __shared__ Acc scratch[32];
  const std::int64_t nvec = cols / L;
  P wv[kVecs];
  Acc dw[kVecs][L];
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const std::int64_t j = threadIdx.x + static_cast<std::int64_t>(k) * blockDim.x;
    if (j < nvec) wv[k] = reinterpret_cast<const P*>(w)[j];
#pragma unroll
    for (int l = 0; l < L; ++l) dw[k][l] = 0;
  }
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const P* xr = reinterpret_cast<const P*>(x + row * cols);
    const P* gr = reinterpret_cast<const P*>(g + row * cols);
    P xv[kVecs];
    P gv[kVecs];
    Acc dot = 0;
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      const std::int64_t j = threadIdx.x + static_cast<std::int64_t>(k) * blockDim.x;
      if (j < nvec) {
        xv[k] = load_once(xr + j);
        gv[k] = load_once(gr + j);
#pragma unroll
        for (int l = 0; l < L; ++l) dot += C::load(gv[k].v[l]) * C::load(wv[k].v[l]) * C::load(xv[k].v[l]);
      }
    }
    dot = block_sum(dot, scratch);
    const Acc inv = rstd[row];
    const Acc coef = inv * inv * dot / static_cast<Acc>(cols);
    P* dxr = reinterpret_cast<P*>(dx + row * cols);
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      const std::int64_t j = threadIdx.x + static_cast<std::int64_t>(k) * blockDim.x;
      if (j < nvec) {
        P out;
#pragma unroll
        for (int l = 0; l < L; ++l) {
          const Acc gl = C::load(gv[k].v[l]);
          const Acc xl = C::load(xv[k].v[l]);
          out.v[l] = C::store(inv * (gl * C::load(wv[k].v[l]) - xl * coef));
          dw[k][l] += gl * xl * inv;
        }
        store_once(dxr + j, out);
      }
    }
  }
  Acc* pr = partial + static_cast<std::int64_t>(blockIdx.x) * cols;
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const std::int64_t j = threadIdx.x + static_cast<std::int64_t>(k) * blockDim.x;
    if (j < nvec) {
#pragma unroll
      for (int l = 0; l < L; ++l) pr[j * L + l] = dw[k][l];
    }
  }
}

// partial must be zeroed: each thread adds into the columns it owns (the same
// ones in every row), so no two threads touch one element.
template <typename T>
__global__ void __launch_bounds__(1024)
    rms_backward_looped(const T* __restrict__ g, const T* __restrict__ x, const T* __restrict__ w,
                        const typename cuda::Convert<T>::Acc* __restrict__ rstd, T* __restrict__ dx,
                        typename cuda::Convert<T>::Acc* __restrict__ partial, std::int64_t rows, std::int64_t cols) {
  using C = cuda::Convert<T>;
  using Acc = typename C::Acc;
  __shared__ Acc scratch[32];
  Acc* pr = partial + static_cast<std::int64_t>(blockIdx.x) * cols;
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * cols;
    const T* gr = g + row * cols;
    Acc dot = 0;
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) dot += C::load(gr[c]) * C::load(w[c]) * C::load(xr[c]);
    dot = block_sum(dot, scratch);
    const Acc inv = rstd[row];
    const Acc coef = inv * inv * dot / static_cast<Acc>(cols);
    T* dxr = dx + row * cols;
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const Acc gl = C::load(gr[c]);
      const Acc xl = C::load(xr[c]);
      dxr[c] = C::store(inv * (gl * C::load(w[c]) - xl * coef));
      pr[c] += gl * xl * inv;
    }
  }
}

template <typename T>
__global__ void rms_reduce_dw(const typename cuda::Convert<T>::Acc* __restrict__ partial, std::int64_t parts,
                              T* __restrict__ dw, std::int64_t cols) {
  using C = cuda::Convert<T>;
  using Acc = typename C::Acc;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < cols; c += stride) {
    Acc s = 0;
    for (std::int64_t p = 0; p < parts; ++p) s += partial[p * cols + c];
    dw[c] = C::store(s);
  }
}

// ---------------------------------------------------------------------------- launch helpers

constexpr std::int64_t kMaxGrid = std::int64_t{1} << 20;  // rows beyond: grid-stride
constexpr int kMaxVecs = 8;

bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

int round_up_warp(std::int64_t n) { return static_cast<int>(std::max<std::int64_t>(32, (n + 31) / 32 * 32)); }

// Smallest kVecs in {1, 2, 4, ..., max_vecs} with nvec / kVecs <= preferred
// threads; failing that max_vecs with up to max_threads. 0: no cached layout
// fits (registers would spill), use the looped kernels.
int pick_vecs(std::int64_t nvec, std::int64_t preferred_threads, std::int64_t max_threads, int max_vecs) {
  for (int v = 1; v <= max_vecs; v *= 2) {
    if ((nvec + v - 1) / v <= preferred_threads) return v;
  }
  return (nvec + max_vecs - 1) / max_vecs <= max_threads ? max_vecs : 0;
}

// f.template operator()<V>() for V = vecs in {1, 2, 4, ..., kMax}.
template <int kMax, typename F>
CudaStatus with_vecs(int vecs, F&& f) {
  if constexpr (kMax >= 8) {
    if (vecs == 8) return f.template operator()<8>();
  }
  if (vecs == 4) return f.template operator()<4>();
  if (vecs == 2) return f.template operator()<2>();
  return f.template operator()<1>();
}

}  // namespace rms_norm_cu
using namespace rms_norm_cu;
CudaStatus rms_norm_forward_cuda(ScalarKind kind, const void* x, const void* w, void* y, void* rstd,
                                 std::int64_t rows, std::int64_t cols, double eps, CudaStream stream) {
  if (rows == 0) return 0;
  return cuda::dispatch_float_kinds(kind, [&]<typename T>() -> CudaStatus {
    using Acc = typename cuda::Convert<T>::Acc;
    const T* px = static_cast<const T*>(x);
    const T* pw = static_cast<const T*>(w);
    T* py = static_cast<T*>(y);
    Acc* pr = static_cast<Acc*>(rstd);
    const Acc e = static_cast<Acc>(eps);
    const unsigned grid = static_cast<unsigned>(std::min(rows, kMaxGrid));
    constexpr int L = kPack<T>;
    const bool packable = cols > 0 && cols % L == 0 && aligned16(x) && aligned16(w) && aligned16(y);
    const int vecs = packable ? pick_vecs(cols / L, 256, 512, kMaxVecs) : 0;
    if (vecs > 0) {
      const int threads = round_up_warp((cols / L + vecs - 1) / vecs);
      return with_vecs<kMaxVecs>(vecs, [&]<int V>() -> CudaStatus {
        rms_forward_cached<T, V><<<grid, threads, 0, stream>>>(px, pw, py, pr, rows, cols, e);
        return cuda::last_launch_status();
      });
    }
    const int threads = cols >= 4096 ? 1024 : 256;
    rms_forward_looped<T><<<grid, threads, 0, stream>>>(px, pw, py, pr, rows, cols, e);
    return cuda::last_launch_status();
  });
}

// Two blocks per SM, each owning a dw partial row; for very wide rows fewer,
// so that the workspace stays near 2^26 Acc elements (the blocks then loop).
std::int64_t rms_norm_backward_cuda_parts(std::int64_t rows, std::int64_t cols) {
  const std::int64_t by_memory = std::max<std::int64_t>(8, (std::int64_t{1} << 26) / std::max<std::int64_t>(1, cols));
  return std::min({rows, static_cast<std::int64_t>(cuda::sm_count()) * 2, by_memory});
}

CudaStatus rms_norm_backward_cuda(ScalarKind kind, const void* grad, const void* x, const void* w, const void* rstd,
                                  void* dx, void* dw, void* workspace, std::int64_t rows, std::int64_t cols,
                                  CudaStream stream) {
  if (cols == 0) return 0;
  return cuda::dispatch_float_kinds(kind, [&]<typename T>() -> CudaStatus {
    using Acc = typename cuda::Convert<T>::Acc;
    if (rows == 0) {
      return static_cast<CudaStatus>(cudaMemsetAsync(dw, 0, static_cast<std::size_t>(cols) * sizeof(T), stream));
    }
    const T* pg = static_cast<const T*>(grad);
    const T* px = static_cast<const T*>(x);
    const T* pw = static_cast<const T*>(w);
    const Acc* pr = static_cast<const Acc*>(rstd);
    T* pdx = static_cast<T*>(dx);
    Acc* partial = static_cast<Acc*>(workspace);
    const std::int64_t parts = rms_norm_backward_cuda_parts(rows, cols);
    constexpr int L = kPack<T>;
    const bool packable = cols % L == 0 && aligned16(grad) && aligned16(x) && aligned16(w) && aligned16(dx);
    // At most 4 packs: the backward also keeps w and the dw sums in registers.
    const int vecs = packable ? pick_vecs(cols / L, 512, 512, 4) : 0;
    CudaStatus status = 0;
    if (vecs > 0) {
      const int threads = round_up_warp((cols / L + vecs - 1) / vecs);
      status = with_vecs<4>(vecs, [&]<int V>() -> CudaStatus {
        rms_backward_cached<T, V><<<static_cast<unsigned>(parts), threads, 0, stream>>>(pg, px, pw, pr, pdx, partial,
                                                                                       rows, cols);
        return cuda::last_launch_status();
      });
    } else {
      status = static_cast<CudaStatus>(
          cudaMemsetAsync(partial, 0, static_cast<std::size_t>(parts * cols) * sizeof(Acc), stream));
      if (status != 0) return status;
      const int threads = cols >= 4096 ? 1024 : 256;
      rms_backward_looped<T><<<static_cast<unsigned>(parts), threads, 0, stream>>>(pg, px, pw, pr, pdx, partial, rows,
                                                                                  cols);
      status = cuda::last_launch_status();
    }
    if (status != 0) return status;
    constexpr int kReduceThreads = 256;
    const std::int64_t blocks = std::min<std::int64_t>((cols + kReduceThreads - 1) / kReduceThreads, kMaxGrid);
    rms_reduce_dw<T><<<static_cast<unsigned>(blocks), kReduceThreads, 0, stream>>>(partial, parts,
                                                                                   static_cast<T*>(dw), cols);
    return cuda::last_launch_status();
  });
}

}  // namespace opkiln::kernels
