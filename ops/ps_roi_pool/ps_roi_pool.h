// Position-sensitive RoIPool with torchvision.ops.ps_roi_pool's semantics and argument order:
//   ps_roi_pool(input[N, C, H, W], rois[K, 5], spatial_scale, pooled_height, pooled_width)
//     -> (output[K, C / (PH * PW), PH, PW], channel_mapping int32)
// Its per-bin math; the loops, checks and dispatch are the family's (common/ps_roi.h).
//   start = round(coord * spatial_scale) (half away from zero); size = max(end - start, 1) per axis
//   bin = size / pooled; window of bin p: start + [floor(p * bin), ceil((p + 1) * bin)), clipped
//     to [0, H - 1] (rows) and [0, W - 1] (columns) in the forward but to [0, H] and [0, W] in the
//     backward, as torchvision clips them: the last row/column of the input takes part in a
//     backward window only
//   output = mean of input[b, c_in] over the window, 0 for an empty window
// The backward adds grad / window area to each element of its window.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

#include "common/host_device.h"
#include "common/ps_roi.h"

namespace opkiln::kernels {

struct PsRoiPool {
  template <typename Acc>
  struct Roi : PsRoiBase {
    std::int64_t x0 = 0, y0 = 0;
    Acc bin_h = 0, bin_w = 0;
  };

  template <typename Acc>
  OPKILN_HD static Roi<Acc> roi(Acc b, Acc x1, Acc y1, Acc x2, Acc y2, const PsRoiGeometry& g) {
    Roi<Acc> r;
    if (!r.claim(b, g)) return r;
    const Acc scale = static_cast<Acc>(g.spatial_scale);
    r.x0 = round_pixel(x1 * scale);
    r.y0 = round_pixel(y1 * scale);
    const std::int64_t w = round_pixel(x2 * scale) - r.x0, h = round_pixel(y2 * scale) - r.y0;
    r.bin_w = static_cast<Acc>(w > 1 ? w : 1) / static_cast<Acc>(g.pooled_width);
    r.bin_h = static_cast<Acc>(h > 1 ? h : 1) / static_cast<Acc>(g.pooled_height);
    return r;
  }

  struct Window {
    std::int64_t h0, h1, w0, w1;
    OPKILN_HD bool empty() const { return h1 <= h0 || w1 <= w0; }
  };

  // `edge`: 1 in the forward (clip to size - 1), 0 in the backward (clip to size).
  template <typename Acc>
  OPKILN_HD static Window window(const Roi<Acc>& r, std::int64_t ph, std::int64_t pw, const PsRoiGeometry& g,
                                 std::int64_t edge) {
    const auto clip = [](std::int64_t v, std::int64_t hi) { return v < 0 ? std::int64_t{0} : (v > hi ? hi : v); };
    const auto lo = [](std::int64_t p, Acc bin) { return static_cast<std::int64_t>(std::floor(static_cast<Acc>(p) * bin)); };
    const auto hi = [](std::int64_t p, Acc bin) { return static_cast<std::int64_t>(std::ceil(static_cast<Acc>(p + 1) * bin)); };
    return {clip(lo(ph, r.bin_h) + r.y0, g.height - edge), clip(hi(ph, r.bin_h) + r.y0, g.height - edge),
            clip(lo(pw, r.bin_w) + r.x0, g.width - edge), clip(hi(pw, r.bin_w) + r.x0, g.width - edge)};
  }

  template <typename Acc, typename Load>
  OPKILN_HD static Acc forward(const Roi<Acc>& r, std::int64_t ph, std::int64_t pw, const PsRoiGeometry& g,
                               Load load) {
    const Window win = window(r, ph, pw, g, 1);
    if (win.empty()) return Acc(0);
    Acc sum = 0;
    for (std::int64_t h = win.h0; h < win.h1; ++h) {
      for (std::int64_t w = win.w0; w < win.w1; ++w) sum += load(h * g.width + w);
    }
    return sum / static_cast<Acc>((win.h1 - win.h0) * (win.w1 - win.w0));
  }

  // The CPU forward's bin for G planes at once (common/ps_roi_cpu.h): the window once, each plane's sum
  // in forward's order.
  template <int G, typename Acc, typename Load>
  static std::array<Acc, G> forward_planes(const Roi<Acc>& r, std::int64_t ph, std::int64_t pw, const PsRoiGeometry& g,
                                           const Load& load) {
    std::array<Acc, G> sum{};
    const Window win = window(r, ph, pw, g, 1);
    if (win.empty()) return sum;
    for (std::int64_t h = win.h0; h < win.h1; ++h) {
      for (std::int64_t w = win.w0; w < win.w1; ++w) {
        for (int i = 0; i < G; ++i) sum[i] += load(i, h * g.width + w);
      }
    }
    const auto area = static_cast<Acc>((win.h1 - win.h0) * (win.w1 - win.w0));
    for (auto& v : sum) v = v / area;
    return sum;
  }

  // The CPU backward's bin for G planes at once: the window once, each plane's adds as backward's.
  template <int G, typename Acc, typename Add>
  static void backward_planes(const Roi<Acc>& r, const std::array<Acc, G>& grad, std::int64_t ph, std::int64_t pw,
                              const PsRoiGeometry& g, const Add& add) {
    const Window win = window(r, ph, pw, g, 0);
    if (win.empty()) return;
    const auto area = static_cast<Acc>((win.h1 - win.h0) * (win.w1 - win.w0));
    std::array<Acc, G> v;
    for (int i = 0; i < G; ++i) v[i] = grad[i] / area;
    for (std::int64_t h = win.h0; h < win.h1; ++h) {
      for (std::int64_t w = win.w0; w < win.w1; ++w) {
        for (int i = 0; i < G; ++i) add(i, h * g.width + w, v[i]);
      }
    }
  }

  template <typename Acc, typename Add>
  OPKILN_HD static void backward(const Roi<Acc>& r, Acc grad, std::int64_t ph, std::int64_t pw,
                                 const PsRoiGeometry& g, Add add) {
    const Window win = window(r, ph, pw, g, 0);
    if (win.empty()) return;
    const Acc v = grad / static_cast<Acc>((win.h1 - win.h0) * (win.w1 - win.w0));
    for (std::int64_t h = win.h0; h < win.h1; ++h) {
      for (std::int64_t w = win.w0; w < win.w1; ++w) add(h * g.width + w, v);
    }
  }
};

}  // namespace opkiln::kernels
