// roi_avg_pool: a member of the RoI family (ops/common/roi_family.h), as roi_align and roi_pool are.
// Its schema is the family's (kiln_tool.new_op.roi_schemas):
//   roi_avg_pool(Tensor input, Tensor rois, float spatial_scale, int pooled_height, int pooled_width) -> Tensor
// This file is the op's own part, its per-bin math; the loops over rois, channels, bins and taps
// (CPU and CUDA, forward and backward), the binding's checks, allocation and dispatch are the family's.
// A roi is scaled (not rounded): y0 = y1 * spatial_scale, bin_h = (y2 - y1) * spatial_scale / pooled_height
// (x likewise); bin (ph, pw) covers rows [floor(y0 + ph * bin_h), ceil(y0 + (ph + 1) * bin_h)) (columns
// likewise), clipped to the plane; its value is the mean of that window, 0 for an empty one. The
// backward spreads grad / (window size) over the window. Computed in Acc: float32 for float32, float16
// and bfloat16, float64 for float64 (rois have input's dtype).
#pragma once

#include <cmath>
#include <cstdint>

#include "common/common.h"
#include "common/host_device.h"
#include "common/roi.h"
#include "common/roi_family.h"

namespace opkiln::kernels {

struct RoiAvgPool {
  static constexpr bool kIndex = false;
  static constexpr bool kOneTap = true;  // a bin is one window

  template <typename Acc>
  struct Roi {
    bool valid = false;
    std::int64_t batch = 0;
    Acc y0 = 0, x0 = 0, bin_h = 0, bin_w = 0;
  };

  template <typename Acc, typename Round>
  OPKILN_HD static Roi<Acc> roi(Acc b, Acc x1, Acc y1, Acc x2, Acc y2, const RoiFamilyGeometry& g, Round) {
    Roi<Acc> r;
    if (!batch_index_valid(b, g.batch)) return r;
    r.valid = true;
    r.batch = static_cast<std::int64_t>(b);
    const Acc scale = static_cast<Acc>(g.spatial_scale);
    r.y0 = y1 * scale;
    r.x0 = x1 * scale;
    r.bin_h = (y2 * scale - r.y0) / static_cast<Acc>(g.pooled_height);
    r.bin_w = (x2 * scale - r.x0) / static_cast<Acc>(g.pooled_width);
    return r;
  }

  template <typename Acc>
  struct Tap {  // the bin's window [h0, h1) x [w0, w1) of a plane `width` wide
    std::int64_t h0, h1, w0, w1, width;
    OPKILN_HD std::int64_t size() const { return h1 > h0 && w1 > w0 ? (h1 - h0) * (w1 - w0) : 0; }
  };

  template <typename Acc>
  OPKILN_HD static std::int64_t clip(Acc v, std::int64_t size) {
    return v < Acc(0) ? 0 : v > static_cast<Acc>(size) ? size : static_cast<std::int64_t>(v);
  }

  template <typename Acc, typename Round, typename F>
  OPKILN_HD static void taps(const Roi<Acc>& r, std::int64_t ph, std::int64_t pw, const RoiFamilyGeometry& g, Round,
                             F&& f) {
    const Acc ph_ = static_cast<Acc>(ph), pw_ = static_cast<Acc>(pw);
    f(Tap<Acc>{clip(std::floor(r.y0 + ph_ * r.bin_h), g.height), clip(std::ceil(r.y0 + (ph_ + 1) * r.bin_h), g.height),
               clip(std::floor(r.x0 + pw_ * r.bin_w), g.width), clip(std::ceil(r.x0 + (pw_ + 1) * r.bin_w), g.width),
               g.width});
  }

  template <typename Acc>
  using State = Acc;

  template <typename Acc>
  OPKILN_HD static State<Acc> start(const Roi<Acc>&) { return Acc(0); }

  template <typename Acc, typename Load>
  OPKILN_HD static void fold(State<Acc>& sum, const Tap<Acc>& t, Load&& load) {
    if (t.size() == 0) return;
    for (std::int64_t h = t.h0; h < t.h1; ++h) {
      for (std::int64_t w = t.w0; w < t.w1; ++w) sum += load(h * t.width + w);
    }
    sum /= static_cast<Acc>(t.size());  // one tap per bin: the mean
  }

  template <typename Acc>
  OPKILN_HD static RoiValue<Acc> finish(const Roi<Acc>&, const State<Acc>& mean) { return {mean, -1}; }

  template <typename Acc>
  OPKILN_HD static Acc grad(const Roi<Acc>&, Acc grad_output) { return grad_output; }

  template <typename Acc, typename Add>
  OPKILN_HD static void scatter(const Tap<Acc>& t, Acc grad, Add&& add) {
    if (t.size() == 0) return;
    const Acc share = grad / static_cast<Acc>(t.size());
    for (std::int64_t h = t.h0; h < t.h1; ++h) {
      for (std::int64_t w = t.w0; w < t.w1; ++w) add(h * t.width + w, share);
    }
  }
};

}  // namespace opkiln::kernels
