// The row-wise reduction ops (an op like rms_norm): reduce each row of x [rows, cols] (the last
// dimension) to one statistic, then compute each element of the row from it; the backward likewise,
// with a second row sum and a weight gradient summed over rows. What such ops share, written once.
//
// Shapes: x [rows, cols] row-major (the binding flattens x.shape[:-1] into rows); weight [cols];
// y [rows, cols] of x's dtype; stat [rows] of the accumulation type Acc (float32 for float32,
// float16, bfloat16; float64 for float64), what the forward saves for the backward.
//
// A member op writes only its per-row math, an `Op` type (host/device, ops/<op>/<op>.h):
//   template <typename Acc> static Acc term(Acc x);                 the forward sums term(x[c]) over the row
//   template <typename Acc> static Acc stat(Acc sum, std::int64_t cols, Acc eps);   the row's statistic
//   template <typename Acc> static Acc apply(Acc x, Acc w, Acc stat);               y[c]
// and, for a backward (g = dL/dy):
//   template <typename Acc> static Acc grad_term(Acc g, Acc x, Acc w, Acc stat);    the backward sums it over the row
//   template <typename Acc> static Acc grad_row(Acc stat, Acc grad_sum, std::int64_t cols);   a per-row coefficient
//   template <typename Acc> static Acc grad_x(Acc g, Acc x, Acc w, Acc stat, Acc coef);       dx[c]
//   template <typename Acc> static Acc grad_w(Acc g, Acc x, Acc stat);   dw[c] = the sum over rows of this
// (rms_norm in these terms: term = x * x, stat = 1 / sqrt(sum / cols + eps), apply = x * stat * w,
// grad_term = g * w * x, grad_row = stat * stat * sum / cols, grad_x = stat * (g * w - x * coef),
// grad_w = g * x * stat), and instantiates the drivers: OPKILN_ROW_REDUCE_CPU(Op) in its .cpp file,
// OPKILN_ROW_REDUCE_CUDA(Op) in its .cu file (row_reduce_cpu.h, row_reduce_cuda.cuh), plus
// OPKILN_ROW_REDUCE_BACKWARD_CPU(Op) / _CUDA(Op) when it has a backward.
//
// What the drivers guarantee: a row sum is a fixed-order sum (CPU: eight interleaved partial sums,
// added in lane order; CUDA: per-thread strided sums, then a fixed tree over the block), so results
// do not depend on the thread count; dw is summed from per-part partial rows in part order, no
// atomics (deterministic for a given thread count on the CPU, for a given shape on CUDA); y and dx
// are rounded to x's dtype once. Only one sum per row: an op that needs two (a mean and a variance
// before the element step) or a max (softmax) does not fit yet.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/common.h"

namespace opkiln::kernels {

struct RowShape {
  std::int64_t rows = 0, cols = 0;
};

// Rows [begin, end): y and stat for those rows.
template <typename Op>
void row_reduce_forward_cpu(ScalarKind kind, const RowShape& s, const void* x, const void* w, void* y, void* stat,
                            double eps, std::int64_t begin, std::int64_t end);

// Rows [begin, end): dx for those rows, and grad_w summed over them ADDED into dw_acc (Acc[cols],
// the caller's partial row for this range, zeroed first).
template <typename Op>
void row_reduce_backward_cpu(ScalarKind kind, const RowShape& s, const void* grad, const void* x, const void* w,
                             const void* stat, void* dx, void* dw_acc, std::int64_t begin, std::int64_t end);

// dw[c] = the sum of partial[p, c] over `parts` Acc rows in part order, stored in x's dtype; columns [begin, end).
template <typename Op>
void row_reduce_sum_parts_cpu(ScalarKind kind, const void* partial, std::int64_t parts, std::int64_t cols, void* dw,
                              std::int64_t begin, std::int64_t end);

// One block per row (grid-stride over rows); no host synchronisation.
template <typename Op>
CudaStatus row_reduce_forward_cuda(ScalarKind kind, const RowShape& s, const void* x, const void* w, void* y,
                                   void* stat, double eps, CudaStream stream);

// Parts of the CUDA backward's dw: workspace of row_reduce_cuda_parts(rows) * cols Acc values.
constexpr std::int64_t row_reduce_cuda_parts(std::int64_t rows) { return rows < 256 ? rows : 256; }

template <typename Op>
CudaStatus row_reduce_backward_cuda(ScalarKind kind, const RowShape& s, const void* grad, const void* x,
                                    const void* w, const void* stat, void* dx, void* dw, void* workspace,
                                    CudaStream stream);

}  // namespace opkiln::kernels
