// roi_align_rotated: a member of the (non-position-sensitive) RoI family (ops/common/roi_family.h).
// Its schema is the family's (kiln_tool.new_op.roi_schemas):
//   roi_align_rotated(Tensor input, Tensor rois, float spatial_scale, int pooled_height, int pooled_width,
//     int sampling_ratio, bool aligned, bool clockwise) -> Tensor
// This file is the op's own part, its per-bin math; the loops over rois, channels, bins and taps
// (CPU and CUDA, forward and backward), the binding's checks, allocation and dispatch are the family's.
// RoIAlign of a rotated box (mmcv's roi_align_rotated): a roi is (batch index, cx, cy, w, h, angle);
//   offset = aligned ? 0.5 : 0; centre = (cx, cy) * spatial_scale - offset; size = (w, h) * spatial_scale,
//   not aligned: at least 1; theta = clockwise ? -angle : angle (radians)
//   bin = size / pooled; grid = sampling_ratio > 0 ? sampling_ratio : ceil(bin) (roi_align's rule)
//   sample (yy, xx) = -size / 2 + p * bin + (i + 0.5) * bin / grid in the box's frame, read at
//   y = yy cos - xx sin + cy, x = yy sin + xx cos + cx with roi_align's bilinear rule;
//   output = sum / max(grid_h * grid_w, 1); the backward scatters grad / count with the same weights.
// Computed in Acc: float32 for float32, float16 and bfloat16, float64 for float64 (rois have input's dtype).
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

#include "common/common.h"
#include "common/host_device.h"
#include "common/roi.h"
#include "common/roi_family.h"
#include "common/roi_sampling.h"

namespace opkiln::kernels {

struct RoiAlignRotated {
  // No index output: the backward goes through the taps (grad, scatter).
  static constexpr bool kIndex = false;

  // A roi row: [K, 6] (batch index, cx, cy, w, h, angle); roi() takes its values in this order.
  static constexpr std::int64_t kBoxColumns = 6;
  static constexpr std::string_view kBoxLayout = "batch index, cx, cy, w, h, angle";

  // The op's own parameters (the schema's after the family's), read as g.params.NAME; the
  // drivers copy them to the device by value.
  struct Params {
    bool clockwise = false;
  };

  // roi_align's sample grid in the box's frame (y0, x0: its corner), and where that frame lies.
  template <typename Acc>
  struct Roi : roi_sampling::Roi<Acc> {
    Acc cy = 0, cx = 0, cos_t = 1, sin_t = 0;
  };

  // round(v): v rounded to the storage dtype and back (for an op that computes in it). rois are
  // this op's (kBoxColumns, kBoxLayout above); another layout
  // or a parameter of the op's own (struct Params): docs/adding-an-op.md, "How a family grows".
  // The op's parameters: g.params.clockwise.
  template <typename Acc, typename Round>
  OPKILN_HD static Roi<Acc> roi(Acc batch, Acc cx, Acc cy, Acc w, Acc h, Acc angle,
                                const RoiFamilyGeometryWith<Params>& g, Round round) {
    static_cast<void>(round);
    Roi<Acc> r;
    if (!batch_index_valid(batch, g.batch) || g.height <= 0 || g.width <= 0) return r;
    r.valid = true;
    r.batch = static_cast<std::int64_t>(batch);
    const Acc scale = static_cast<Acc>(g.spatial_scale), offset = g.aligned ? Acc(0.5) : Acc(0);
    r.cx = cx * scale - offset;
    r.cy = cy * scale - offset;
    const Acc theta = g.params.clockwise ? -angle : angle;
    r.cos_t = std::cos(theta);
    r.sin_t = std::sin(theta);
    Acc roi_w = w * scale, roi_h = h * scale;
    if (!g.aligned) {
      roi_w = roi_sampling::at_least(roi_w, Acc(1));
      roi_h = roi_sampling::at_least(roi_h, Acc(1));
    }
    r.y0 = -roi_h / Acc(2);
    r.x0 = -roi_w / Acc(2);
    r.bin_h = roi_h / static_cast<Acc>(g.pooled_height);
    r.bin_w = roi_w / static_cast<Acc>(g.pooled_width);
    r.grid_h = g.sampling_ratio > 0 ? g.sampling_ratio : roi_sampling::adaptive_grid(r.bin_h);
    r.grid_w = g.sampling_ratio > 0 ? g.sampling_ratio : roi_sampling::adaptive_grid(r.bin_w);
    r.step_h = r.grid_h > 0 ? r.bin_h / static_cast<Acc>(r.grid_h) : Acc(0);
    r.step_w = r.grid_w > 0 ? r.bin_w / static_cast<Acc>(r.grid_w) : Acc(0);
    const std::int64_t n = r.grid_h * r.grid_w;
    r.count = static_cast<Acc>(n > 1 ? n : 1);
    return r;
  }

  template <typename Acc>
  using Tap = roi_sampling::Sample<Acc>;  // a valid bilinear sample

  // The valid samples of bin (ph, pw), iy then ix, rotated into the plane.
  template <typename Acc, typename Round, typename F>
  OPKILN_HD static void taps(const Roi<Acc>& roi, std::int64_t ph, std::int64_t pw,
                             const RoiFamilyGeometryWith<Params>& g,
                             Round round, F&& f) {
    static_cast<void>(round);
    for (std::int64_t iy = 0; iy < roi.grid_h; ++iy) {
      const Acc yy = roi_sampling::sample_y(roi, ph, iy);
      for (std::int64_t ix = 0; ix < roi.grid_w; ++ix) {
        const Acc xx = roi_sampling::sample_x(roi, pw, ix);
        const Tap<Acc> s = roi_sampling::bilinear(g.height, g.width, yy * roi.cos_t - xx * roi.sin_t + roi.cy,
                                                  yy * roi.sin_t + xx * roi.cos_t + roi.cx);
        if (s.valid) f(s);
      }
    }
  }

  template <typename Acc>
  using State = Acc;  // the sum of the samples

  template <typename Acc>
  OPKILN_HD static State<Acc> start(const Roi<Acc>&) { return Acc(0); }

  template <typename Acc, typename Load>
  OPKILN_HD static void fold(State<Acc>& state, const Tap<Acc>& t, Load&& load) { state += bilinear::value(t, load); }

  template <typename Acc>
  OPKILN_HD static RoiValue<Acc> finish(const Roi<Acc>& roi, const State<Acc>& state) {
    return {state / roi.count, -1};
  }

  template <typename Acc>
  OPKILN_HD static Acc grad(const Roi<Acc>& roi, Acc grad_output) { return grad_output / roi.count; }

  template <typename Acc, typename Add>
  OPKILN_HD static void scatter(const Tap<Acc>& t, Acc grad, Add&& add) { bilinear::scatter(t, grad, add); }
};

}  // namespace opkiln::kernels
