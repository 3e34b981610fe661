// The CUDA drivers of the row-wise reduction ops (common/row_reduce.h): one block per row
// (grid-stride over rows), each thread summing a strided slice of the row, then a fixed tree over
// the block (warp shuffles, then the warps' sums); the backward's dw in per-block partial rows of
// the workspace, summed in block order by a second kernel (deterministic, no atomics). Include it
// in the op's .cu file and instantiate with OPKILN_ROW_REDUCE_CUDA(Op) (and _BACKWARD_CUDA(Op)).
#pragma once

#include "common/cuda_common.cuh"
#include "common/row_reduce.h"

// A named namespace, not an anonymous one: nvcc hashes the absolute source path into
// anonymous-namespace names, which would make the fatbin differ between checkouts.
namespace opkiln::kernels::row_reduce_cu {

constexpr int kRowThreads = 256;  // a multiple of 32 (block_sum)

template <typename Acc>
__device__ __forceinline__ Acc warp_sum(Acc v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// The sum over the block (blockDim.x a multiple of 32), the same value in every thread; scratch: 32 Acc
// of shared memory, reused call after call (rms_norm's kernels use it too).
template <typename Acc>
__device__ __forceinline__ Acc block_sum(Acc v, Acc* scratch) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // the previous call's readers are done with scratch
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  return warp_sum(lane < warps ? scratch[lane] : Acc(0));
}

template <typename Op, typename T>
__global__ void forward_kernel(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                               typename cuda::Convert<T>::Acc* __restrict__ stat, RowShape s,
                               typename cuda::Convert<T>::Acc eps) {
  using C = cuda::Convert<T>;
  using Acc = typename C::Acc;
  __shared__ Acc scratch[32];
  for (std::int64_t row = blockIdx.x; row < s.rows; row += gridDim.x) {
    const T* xr = x + row * s.cols;
    Acc sum = 0;
    for (std::int64_t c = threadIdx.x; c < s.cols; c += blockDim.x) sum += Op::term(C::load(xr[c]));
    const Acc st = Op::stat(block_sum(sum, scratch), s.cols, eps);
    if (threadIdx.x == 0) stat[row] = st;
    T* yr = y + row * s.cols;
    for (std::int64_t c = threadIdx.x; c < s.cols; c += blockDim.x) {
      yr[c] = C::store(Op::apply(C::load(xr[c]), C::load(w[c]), st));
    }
  }
}

// Block b owns workspace row b (its dw partial sums over the rows it visits).
template <typename Op, typename T>
__global__ void backward_kernel(const T* __restrict__ grad, const T* __restrict__ x, const T* __restrict__ w,
                                const typename cuda::Convert<T>::Acc* __restrict__ stat, T* __restrict__ dx,
                                typename cuda::Convert<T>::Acc* __restrict__ partial, RowShape s) {
  using C = cuda::Convert<T>;
  using Acc = typename C::Acc;
  __shared__ Acc scratch[32];
  Acc* part = partial + static_cast<std::int64_t>(blockIdx.x) * s.cols;
  for (std::int64_t c = threadIdx.x; c < s.cols; c += blockDim.x) part[c] = Acc(0);
  for (std::int64_t row = blockIdx.x; row < s.rows; row += gridDim.x) {
    const T* gr = grad + row * s.cols;
    const T* xr = x + row * s.cols;
    const Acc st = stat[row];
    Acc sum = 0;
    for (std::int64_t c = threadIdx.x; c < s.cols; c += blockDim.x) {
      sum += Op::grad_term(C::load(gr[c]), C::load(xr[c]), C::load(w[c]), st);
    }
    const Acc coef = Op::grad_row(st, block_sum(sum, scratch), s.cols);
    T* dxr = dx + row * s.cols;
    for (std::int64_t c = threadIdx.x; c < s.cols; c += blockDim.x) {
      const Acc g = C::load(gr[c]);
      const Acc xv = C::load(xr[c]);
      dxr[c] = C::store(Op::grad_x(g, xv, C::load(w[c]), st, coef));
      part[c] += Op::grad_w(g, xv, st);
    }
  }
}

template <typename T>
__global__ void sum_parts_kernel(const typename cuda::Convert<T>::Acc* __restrict__ partial, std::int64_t parts,
                                 std::int64_t cols, T* __restrict__ dw) {
  using C = cuda::Convert<T>;
  cuda::grid_stride(cols, [&](std::int64_t c) {
    typename C::Acc sum = 0;
    for (std::int64_t p = 0; p < parts; ++p) sum += partial[p * cols + c];
    dw[c] = C::store(sum);
  });
}

inline unsigned row_blocks(std::int64_t rows) {
  const std::int64_t most = static_cast<std::int64_t>(cuda::sm_count()) * 8;
  return static_cast<unsigned>(rows < most ? rows : most);
}

}  // namespace opkiln::kernels::row_reduce_cu

namespace opkiln::kernels {

template <typename Op>
CudaStatus row_reduce_forward_cuda(ScalarKind kind, const RowShape& s, const void* x, const void* w, void* y,
                                   void* stat, double eps, CudaStream stream) {
  if (s.rows == 0) return 0;
  return cuda::dispatch_float_kinds(kind, [&]<typename T>() -> CudaStatus {
    using Acc = typename cuda::Convert<T>::Acc;
    row_reduce_cu::forward_kernel<Op, T><<<row_reduce_cu::row_blocks(s.rows), row_reduce_cu::kRowThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(w), static_cast<T*>(y), static_cast<Acc*>(stat), s,
        static_cast<Acc>(eps));
    return cuda::last_launch_status();
  });
}

template <typename Op>
CudaStatus row_reduce_backward_cuda(ScalarKind kind, const RowShape& s, const void* grad, const void* x,
                                    const void* w, const void* stat, void* dx, void* dw, void* workspace,
                                    CudaStream stream) {
  return cuda::dispatch_float_kinds(kind, [&]<typename T>() -> CudaStatus {
    using Acc = typename cuda::Convert<T>::Acc;
    const std::int64_t parts = row_reduce_cuda_parts(s.rows);
    if (parts > 0) {
      // Exactly `parts` blocks: block b owns workspace row b.
      row_reduce_cu::backward_kernel<Op, T><<<static_cast<unsigned>(parts), row_reduce_cu::kRowThreads, 0, stream>>>(
          static_cast<const T*>(grad), static_cast<const T*>(x), static_cast<const T*>(w),
          static_cast<const Acc*>(stat), static_cast<T*>(dx), static_cast<Acc*>(workspace), s);
      if (const CudaStatus status = cuda::last_launch_status(); status != 0) return status;
    }
    if (s.cols == 0) return 0;
    row_reduce_cu::sum_parts_kernel<T><<<cuda::grid_for(s.cols), cuda::kThreads, 0, stream>>>(
        static_cast<const Acc*>(workspace), parts, s.cols, static_cast<T*>(dw));
    return cuda::last_launch_status();
  });
}

}  // namespace opkiln::kernels

// The CUDA forward for one op's per-row math `Op` (a type in opkiln::kernels).
#define OPKILN_ROW_REDUCE_CUDA(Op)                                                                                 \
  template opkiln::kernels::CudaStatus opkiln::kernels::row_reduce_forward_cuda<opkiln::kernels::Op>(              \
      opkiln::kernels::ScalarKind, const opkiln::kernels::RowShape&, const void*, const void*, void*, void*, double, \
      opkiln::kernels::CudaStream)
// Its CUDA backward.
#define OPKILN_ROW_REDUCE_BACKWARD_CUDA(Op)                                                                        \
  template opkiln::kernels::CudaStatus opkiln::kernels::row_reduce_backward_cuda<opkiln::kernels::Op>(             \
      opkiln::kernels::ScalarKind, const opkiln::kernels::RowShape&, const void*, const void*, const void*,        \
      const void*, void*, void*, void*, opkiln::kernels::CudaStream)
