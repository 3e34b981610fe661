// RMSNorm over the last dimension of a [rows, cols] row-major matrix:
//   rstd[r] = 1 / sqrt(mean_c(x[r, c]^2) + eps)
//   y[r, c] = x[r, c] * rstd[r] * w[c]
// Backward (g = dL/dy):
//   dx[r, c] = rstd[r] * (g[r, c] * w[c] - x[r, c] * rstd[r]^2 * mean_c(g[r, c] * w[c] * x[r, c]))
//   dw[c]    = sum_r g[r, c] * x[r, c] * rstd[r]
// Accumulation is in float32 for float32/float16/bfloat16 and float64 for
// float64; rstd and the dw partial sums use that accumulation type ("Acc").
#pragma once

#include "common/common.h"

namespace opkiln::kernels {

// Rows [row_begin, row_end); x, y: [rows, cols]; w: [cols]; rstd: Acc[rows].
void rms_norm_forward_cpu(ScalarKind kind, const void* x, const void* w, void* y, void* rstd,
                          std::int64_t row_begin, std::int64_t row_end, std::int64_t cols, double eps);

// Rows [row_begin, row_end): writes dx for those rows and ADDS
// sum_r g * x * rstd over them into dw_acc (Acc[cols], caller-zeroed).
void rms_norm_backward_cpu(ScalarKind kind, const void* grad, const void* x, const void* w, const void* rstd,
                           void* dx, void* dw_acc, std::int64_t row_begin, std::int64_t row_end, std::int64_t cols);

// dw[c] = sum_p partial[p, c] over `parts` Acc rows, stored in the weight dtype.
void rms_norm_reduce_dw_cpu(ScalarKind kind, const void* partial, std::int64_t parts, void* dw,
                            std::int64_t col_begin, std::int64_t col_end, std::int64_t cols);

CudaStatus rms_norm_forward_cuda(ScalarKind kind, const void* x, const void* w, void* y, void* rstd,
                                 std::int64_t rows, std::int64_t cols, double eps, CudaStream stream);

// The backward needs a device workspace of Acc[parts, cols] for the dw partial
// sums; ask for `parts` first and pass a buffer of at least parts * cols Acc.
std::int64_t rms_norm_backward_cuda_parts(std::int64_t rows, std::int64_t cols);

CudaStatus rms_norm_backward_cuda(ScalarKind kind, const void* grad, const void* x, const void* w, const void* rstd,
                                  void* dx, void* dw, void* workspace, std::int64_t rows, std::int64_t cols,
                                  CudaStream stream);

}  // namespace opkiln::kernels
