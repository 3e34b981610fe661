// RoIPool with torchvision.ops.roi_pool semantics and argument order:
//   roi_pool(input[N, C, H, W], rois[K, 5], spatial_scale, pooled_height, pooled_width)
//     -> (output[K, C, PH, PW] of input's dtype, argmax[K, C, PH, PW] int32)
// A roi (common/roi.h) is scaled and rounded to whole pixels (half away from zero):
//   x1' = round(x1 * spatial_scale), ..., y2' = round(y2 * spatial_scale)
//   roi_w = max(x2' - x1' + 1, 1), roi_h likewise; bin = roi / pooled, in the storage dtype
//   bin (ph, pw) covers rows [floor(ph * bin_h), ceil((ph + 1) * bin_h)) + y1' (columns
//   likewise), clipped to the plane.
//   output = the bin's largest value (ties: the first in row-major order; NaN never wins),
//            0 for an empty bin; argmax = its index h * W + w in the plane, -1 for an empty bin.
// The backward adds grad_output[k, c, ph, pw] to grad_input[b, c] at argmax (nothing for -1, nor
// for an index outside the plane, which only a hand-made argmax holds): the exact adjoint of the
// forward's selection.
//
// Coordinates are float32 for float32/float16/bfloat16 data and float64 for float64 (rois have
// the dtype of input); bin sizes and bin edges are rounded to the storage dtype as torchvision's
// kernels compute them, so 16-bit bins match its edges. This file is its per-bin math only
// (windows: roi_pool_bins.h); the loops, checks, dispatch and the backward through argmax are
// the RoI family's (common/roi_family.h, facade/roi_family.h).
// Batch index contract: common/roi.h (an invalid roi pools nothing and gives no gradient; the
// binding rejects it first, with facade/rois.h's check_batch_index).
//
// Errors the binding raises (tests/ops/test_roi_pool.py matches these substrings; the rois'
// checks are facade/rois.h's, shared with roi_align):
//   [ValueError]   "opkiln::roi_pool: rois[<k>, 0] = <value> is a batch index out of range [0, <N>)"
//   [RuntimeError] "opkiln::roi_pool: rois must have shape [K, 5] (batch index, x1, y1, x2, y2), got [...]"
//   [RuntimeError] "opkiln::roi_pool: input must have shape [N, C, H, W], got [...]"
//   [ValueError]   "opkiln::roi_pool: pooled_height and pooled_width must be >= 0, got <PH> and <PW>"
//   [RuntimeError] dtypes, devices: check_same_dtype, float_kind, check_same_device
//   [RuntimeError] "opkiln::_roi_pool_backward: argmax must be int32 of grad's shape ..."
#pragma once

#include <cfloat>
#include <array>
#include <cstdint>
#include <type_traits>

#include "common/host_device.h"
#include "common/roi_family.h"
#include "roi_pool/roi_pool_bins.h"

namespace opkiln::kernels {

struct RoiPool {
  static constexpr bool kIndex = true;  // argmax; the family's backward adds grad there
  static constexpr bool kOneTap = true;  // a bin is one window (common/roi_family_cpu.h)
  static constexpr int kPlanes = 8;

  template <typename Acc>
  using Roi = roi_pool_bins::Roi<Acc>;
  template <typename Acc>
  struct Tap {  // the bin's window in a plane `width` wide
    roi_pool_bins::Span rows, cols;
    std::int64_t width;
  };
  template <typename Acc>
  using State = roi_pool_bins::Max<Acc>;

  template <typename Acc, typename Round>
  OPKILN_HD static Roi<Acc> roi(Acc b, Acc x1, Acc y1, Acc x2, Acc y2, const RoiFamilyGeometry& g, Round round) {
    const Acc scale = round(static_cast<Acc>(g.spatial_scale));
    Roi<Acc> r = roi_pool_bins::make_roi<Acc>(b, round(x1 * scale), round(y1 * scale), round(x2 * scale),
                                              round(y2 * scale), Acc(1), g.batch, g.pooled_height, g.pooled_width,
                                              round);
    r.lowest = round(static_cast<Acc>(-FLT_MAX));
    return r;
  }

  template <typename Acc, typename Round, typename F>
  OPKILN_HD static void taps(const Roi<Acc>& roi, std::int64_t ph, std::int64_t pw, const RoiFamilyGeometry& g,
                             Round round, F&& f) {
    f(Tap<Acc>{roi_pool_bins::span(ph, roi.bin_h, roi.y0, g.height, round),
               roi_pool_bins::span(pw, roi.bin_w, roi.x0, g.width, round), g.width});
  }

  template <typename Acc>
  OPKILN_HD static State<Acc> start(const Roi<Acc>& roi) { return {roi.lowest, -1}; }

  template <typename Acc, typename Load>
  OPKILN_HD static void fold(State<Acc>& best, const Tap<Acc>& t, Load&& load) {
    best = roi_pool_bins::window_max(best, t.rows, t.cols, t.width, load);
  }

  // The CPU forward's window over G channel planes at once (common/roi_family_cpu.h).
#if !defined(__CUDACC__)
  template <int G, typename Acc, typename Load>
  static void fold_planes(std::array<State<Acc>, G>& best, const Tap<Acc>& t, const Load& load) {
    if constexpr (G % 4 == 0 && std::is_same_v<Acc, float>) {
      roi_pool_bins::window_max_vec<G>(best, t.rows, t.cols, t.width, load);
    } else {
      roi_pool_bins::window_max_planes<G>(best, t.rows, t.cols, t.width, load);
    }
  }
#endif

  template <typename Acc>
  OPKILN_HD static RoiValue<Acc> finish(const Roi<Acc>&, const State<Acc>& best) { return {best.value, best.index}; }
};

}  // namespace opkiln::kernels
