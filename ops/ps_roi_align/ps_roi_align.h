// Position-sensitive RoIAlign with torchvision.ops.ps_roi_align's semantics and argument order:
//   ps_roi_align(input[N, C, H, W], rois[K, 5], spatial_scale, pooled_height, pooled_width,
//                sampling_ratio) -> (output[K, C / (PH * PW), PH, PW], channel_mapping int32)
// Its per-bin math; the loops, checks and dispatch are the family's (common/ps_roi.h).
//   start = coord * spatial_scale - 0.5 (always aligned); roi = end - start, not clamped
//   bin = roi / pooled; grid = sampling_ratio > 0 ? sampling_ratio : ceil(bin) per axis (may be 0
//     or negative: then no samples)
//   output = sum over the grid of bilinear(input[b, c_in], y, x) at
//     y = start_y + ph * bin_h + (iy + 0.5) * bin_h / grid_h (x likewise),
//     divided by grid_h * grid_w UNCLAMPED, as torchvision: a bin with a zero grid (a box of zero
//     or small negative size with the adaptive grid) is 0 / 0 = NaN; a NaN or out-of-int box
//     gets a zero grid (torchvision's int cast is undefined there).
//   bilinear: common/roi_sampling.h (torchvision's boundary rules).
// The backward adds grad * w / count at each tap (torchvision's order of operations).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

#include "common/host_device.h"
#include "common/ps_roi.h"
#include "common/roi_sampling.h"

namespace opkiln::kernels {

struct PsRoiAlign {
  template <typename Acc>
  struct Roi : PsRoiBase {
    std::int64_t grid_h = 0, grid_w = 0;
    Acc y0 = 0, x0 = 0, bin_h = 0, bin_w = 0, count = 0;
  };

  // ceil(bin) as torchvision's int grid size; 0 where that cast is undefined (NaN, beyond int).
  template <typename Acc>
  OPKILN_HD static std::int64_t grid(Acc bin) {
    const Acc n = std::ceil(bin);
    return n > Acc(-2147483648.0) && n < Acc(2147483647.0) ? static_cast<std::int64_t>(n) : 0;
  }

  template <typename Acc>
  OPKILN_HD static Roi<Acc> roi(Acc b, Acc x1, Acc y1, Acc x2, Acc y2, const PsRoiGeometry& g) {
    Roi<Acc> r;
    if (g.height <= 0 || g.width <= 0 || !r.claim(b, g)) return r;
    const Acc scale = static_cast<Acc>(g.spatial_scale);
    r.x0 = x1 * scale - Acc(0.5);
    r.y0 = y1 * scale - Acc(0.5);
    r.bin_w = (x2 * scale - Acc(0.5) - r.x0) / static_cast<Acc>(g.pooled_width);
    r.bin_h = (y2 * scale - Acc(0.5) - r.y0) / static_cast<Acc>(g.pooled_height);
    r.grid_h = g.sampling_ratio > 0 ? g.sampling_ratio : grid(r.bin_h);
    r.grid_w = g.sampling_ratio > 0 ? g.sampling_ratio : grid(r.bin_w);
    r.count = static_cast<Acc>(r.grid_h * r.grid_w);
    return r;
  }

  // f(sample) for every valid bilinear sample of bin (ph, pw), in torchvision's order.
  template <typename Acc, typename F>
  OPKILN_HD static void for_each_sample(const Roi<Acc>& r, std::int64_t ph, std::int64_t pw, const PsRoiGeometry& g,
                                        F&& f) {
    const Acc hstart = static_cast<Acc>(ph) * r.bin_h + r.y0;
    const Acc wstart = static_cast<Acc>(pw) * r.bin_w + r.x0;
    for (std::int64_t iy = 0; iy < r.grid_h; ++iy) {
      const Acc y = hstart + static_cast<Acc>(static_cast<float>(iy) + 0.5f) * r.bin_h / static_cast<Acc>(r.grid_h);
      for (std::int64_t ix = 0; ix < r.grid_w; ++ix) {
        const Acc x =
            wstart + static_cast<Acc>(static_cast<float>(ix) + 0.5f) * r.bin_w / static_cast<Acc>(r.grid_w);
        const roi_sampling::Sample<Acc> s = roi_sampling::bilinear(g.height, g.width, y, x);
        if (s.valid) f(s);
      }
    }
  }

  template <typename Acc, typename Load>
  OPKILN_HD static Acc forward(const Roi<Acc>& r, std::int64_t ph, std::int64_t pw, const PsRoiGeometry& g,
                               Load load) {
    Acc sum = 0;
    for_each_sample(r, ph, pw, g, [&](const roi_sampling::Sample<Acc>& s) {
      sum += bilinear::value(s, load);
    });
    return sum / r.count;
  }

  // The CPU forward's bin for G planes at once (common/ps_roi_cpu.h): the samples once, each plane's sum
  // in forward's order.
  template <int G, typename Acc, typename Load>
  static std::array<Acc, G> forward_planes(const Roi<Acc>& r, std::int64_t ph, std::int64_t pw, const PsRoiGeometry& g,
                                           const Load& load) {
    std::array<Acc, G> sum{};
    for_each_sample(r, ph, pw, g, [&](const roi_sampling::Sample<Acc>& s) {
      for (int i = 0; i < G; ++i) {
        sum[i] += bilinear::value(s, [&](std::int64_t o) { return load(i, o); });
      }
    });
    for (auto& v : sum) v = v / r.count;
    return sum;
  }

  // The CPU backward's bin for G planes at once: the samples once, each plane's adds as backward's.
  template <int G, typename Acc, typename Add>
  static void backward_planes(const Roi<Acc>& r, const std::array<Acc, G>& grad, std::int64_t ph, std::int64_t pw,
                              const PsRoiGeometry& g, const Add& add) {
    for_each_sample(r, ph, pw, g, [&](const roi_sampling::Sample<Acc>& s) {
      for (int i = 0; i < G; ++i) {
        add(i, s.o1, grad[i] * s.w1 / r.count);
        add(i, s.o2, grad[i] * s.w2 / r.count);
        add(i, s.o3, grad[i] * s.w3 / r.count);
        add(i, s.o4, grad[i] * s.w4 / r.count);
      }
    });
  }

  template <typename Acc, typename Add>
  OPKILN_HD static void backward(const Roi<Acc>& r, Acc grad, std::int64_t ph, std::int64_t pw,
                                 const PsRoiGeometry& g, Add add) {
    for_each_sample(r, ph, pw, g, [&](const roi_sampling::Sample<Acc>& s) {
      add(s.o1, grad * s.w1 / r.count);
      add(s.o2, grad * s.w2 / r.count);
      add(s.o3, grad * s.w3 / r.count);
      add(s.o4, grad * s.w4 / r.count);
    });
  }
};

}  // namespace opkiln::kernels
