// row_center: a row-wise reduction op (a member of the family of ops/common/row_reduce.h, as rms_norm's
// math is): each row of x (its last dimension) is summed to one statistic, then each element of the
// row is computed from it. Its schema is the family's (kiln_tool.new_op.rowwise_schemas):
//   row_center(Tensor x, Tensor weight, float eps) -> (Tensor, Tensor)
// This file is the op's own part, its per-row math; the loops over rows and columns (CPU and CUDA),
// the order of the sums and the weight gradient's reduction are the family's.
// y[r, c] = (x[r, c] - mean_c x[r, c]) * w[c] (eps unused); stat = the row's mean (0 for an empty row).
// Backward: dx = g * w - mean_c(g * w), dw = sum_r g * (x - mean).
// Computed in Acc: float32 for float32, float16 and bfloat16, float64 for float64.
#pragma once

#include <cstdint>

#include "common/common.h"
#include "common/host_device.h"
#include "common/row_reduce.h"

namespace opkiln::kernels {

struct RowCenter {
  template <typename Acc>
  OPKILN_HD static Acc term(Acc x) { return x; }

  template <typename Acc>
  OPKILN_HD static Acc stat(Acc sum, std::int64_t cols, Acc) { return cols > 0 ? sum / static_cast<Acc>(cols) : Acc(0); }

  template <typename Acc>
  OPKILN_HD static Acc apply(Acc x, Acc w, Acc mean) { return (x - mean) * w; }

  template <typename Acc>
  OPKILN_HD static Acc grad_term(Acc g, Acc, Acc w, Acc) { return g * w; }

  template <typename Acc>
  OPKILN_HD static Acc grad_row(Acc, Acc grad_sum, std::int64_t cols) {
    return cols > 0 ? grad_sum / static_cast<Acc>(cols) : Acc(0);
  }

  template <typename Acc>
  OPKILN_HD static Acc grad_x(Acc g, Acc, Acc w, Acc, Acc coef) { return g * w - coef; }

  template <typename Acc>
  OPKILN_HD static Acc grad_w(Acc g, Acc x, Acc mean) { return g * (x - mean); }
};

}  // namespace opkiln::kernels
