// RoIAlign with torchvision.ops.roi_align semantics and argument order:
//   roi_align(input[N, C, H, W], rois[K, 5], spatial_scale, pooled_height, pooled_width,
//             sampling_ratio, aligned) -> output[K, C, PH, PW]
// A roi is (batch index, x1, y1, x2, y2) in input coordinates before spatial_scale.
//   offset = aligned ? 0.5 : 0;  start = coord * spatial_scale - offset
//   roi_w = x2' - x1', roi_h = y2' - y1'; not aligned: both clamped to >= 1
//   bin = roi / pooled;  grid = sampling_ratio > 0 ? sampling_ratio : ceil(roi / pooled)
//     (an adaptive grid of a NaN, infinite or over-2^31 bin has no samples: output 0)
//   output[k, c, ph, pw] = sum over the grid_h * grid_w samples at
//     y = y1' + ph * bin_h + (iy + 0.5) * bin_h / grid_h (x likewise) of bilinear(input[b, c], y, x),
//     divided by max(grid_h * grid_w, 1)
//   bilinear: 0 when y < -1 or y > H or x < -1 or x > W; else y, x clamped to >= 0, and a
//     sample at or past the last row/column reads that row/column.
// The backward scatters grad_output[k, c, ph, pw] / count with the same bilinear weights
// (a weight falls where the forward read), so it is the exact adjoint of the forward.
// This file is its per-bin math only; the loops, checks and dispatch are the RoI family's
// (common/roi_family.h, facade/roi_family.h).
//
// Arithmetic (coordinates, weights, sums) is float32 for float32/float16/bfloat16 data and
// float64 for float64; rois have the dtype of input.
//
// Batch index contract: common/roi.h (an invalid roi gets a zero output and gives no gradient;
// the binding rejects it first, forward and backward, with facade/rois.h's check_batch_index).
//
// Errors the binding raises (tests/ops/test_roi_align.py matches these substrings; the error
// type in the per-torch build in brackets, RuntimeError for all in the stable ABI):
//   [ValueError]   "opkiln::roi_align: rois[<k>, 0] = <value> is a batch index out of range [0, <N>)"
//   [RuntimeError] "opkiln::roi_align: rois must have shape [K, 5] (batch index, x1, y1, x2, y2), got [...]"
//   [RuntimeError] "opkiln::roi_align: input must have shape [N, C, H, W], got [...]"
//   [ValueError]   "opkiln::roi_align: pooled_height and pooled_width must be positive, got <PH> and <PW>"
//   [TypeError]    dtypes differ: check_same_dtype(input, rois): "... ; cast one of them"
//   [TypeError]    not a float dtype: float_kind: "... must be float32, float64, float16 or bfloat16"
//   [RuntimeError] devices differ: check_same_device(input, rois): "...; move both to the same device"
// spatial_scale and sampling_ratio take any value (as in torchvision).
#pragma once

#include <cstdint>

#include "common/host_device.h"
#include "common/roi_family.h"
#include "common/roi_sampling.h"

namespace opkiln::kernels {

struct RoiAlign {
  static constexpr bool kIndex = false;

  template <typename Acc>
  using Roi = roi_sampling::Roi<Acc>;
  template <typename Acc>
  using Tap = roi_sampling::Sample<Acc>;  // a valid bilinear sample
  template <typename Acc>
  using State = Acc;  // the sum of the samples

  template <typename Acc, typename Round>
  OPKILN_HD static Roi<Acc> roi(Acc b, Acc x1, Acc y1, Acc x2, Acc y2, const RoiFamilyGeometry& g, Round) {
    return roi_sampling::make_roi<Acc>(b, x1, y1, x2, y2, static_cast<Acc>(g.spatial_scale), g);
  }

  // The valid samples of bin (ph, pw), iy then ix (torchvision's order).
  template <typename Acc, typename Round, typename F>
  OPKILN_HD static void taps(const Roi<Acc>& roi, std::int64_t ph, std::int64_t pw, const RoiFamilyGeometry& g, Round,
                             F&& f) {
    roi_sampling::for_each_sample(roi, ph, pw, g.height, g.width, f);
  }

  template <typename Acc>
  OPKILN_HD static State<Acc> start(const Roi<Acc>&) { return Acc(0); }

  template <typename Acc, typename Load>
  OPKILN_HD static void fold(State<Acc>& sum, const Tap<Acc>& s, Load&& load) {
    sum += bilinear::value(s, load);
  }

  template <typename Acc>
  OPKILN_HD static RoiValue<Acc> finish(const Roi<Acc>& roi, const State<Acc>& sum) {
    return {sum / roi.count, -1};
  }

  template <typename Acc>
  OPKILN_HD static Acc grad(const Roi<Acc>& roi, Acc grad_output) { return grad_output / roi.count; }

  template <typename Acc, typename Add>
  OPKILN_HD static void scatter(const Tap<Acc>& s, Acc grad, Add&& add) {
    bilinear::scatter(s, grad, add);
  }
};

}  // namespace opkiln::kernels
