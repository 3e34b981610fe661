// The bilinear sampling geometry of roi_align (torchvision's rules), shared by its CPU and CUDA cores
// so that both place every sample and weigh every bilinear tap identically: where a roi's sample grid
// lies, how many samples a bin takes, and the four taps of a sample. Plain C++; host/device qualified
// under nvcc.
//
// What holds for which op: `bilinear` (the taps and torchvision's boundary rules) is every
// bilinear RoI op's, ps_roi_align's too. `make_roi`, `sample_x/y`, `for_each_sample` (a bin's sample
// loop) and `Roi::count` are roi_align's only: torchvision's ps_roi_align places samples at
// start + p * bin + (i + 0.5) * bin / grid (not
// (i + 0.5) * (bin / grid)), always shifts by -0.5, never clamps a roi to one pixel, takes ceil(bin)
// as a (possibly zero or negative) int grid, and divides by grid_h * grid_w unclamped, so a zero grid
// gives 0 / 0 = NaN where roi_align gives 0 (ops/ps_roi_align/ps_roi_align.h has its rules).
#pragma once

#include <cmath>
#include <cstdint>

#include "common/bilinear.h"
#include "common/host_device.h"
#include "common/roi.h"

namespace opkiln::kernels::roi_sampling {

// A roi in sampling terms: where its grid starts, the bin and sample steps, the grid
// size; valid = false: its batch index is out of range (or NaN), it reads nothing.
template <typename Acc>
struct Roi {
  bool valid = false;
  std::int64_t batch = 0;
  Acc y0 = 0, x0 = 0, bin_h = 0, bin_w = 0, step_h = 0, step_w = 0;
  std::int64_t grid_h = 0, grid_w = 0;
  Acc count = 1;
};

// Samples per axis when sampling_ratio <= 0: ceil(bin). 0 (output 0) for a negative size
// (aligned rois with x2 < x1), and for a NaN, infinite or absurd (over 2^31 samples) one,
// where torchvision's int cast is undefined.
template <typename Acc>
OPKILN_HD std::int64_t adaptive_grid(Acc bin) {
  const Acc n = std::ceil(bin);
  return n > Acc(0) && n <= Acc(0x7fffffff) ? static_cast<std::int64_t>(n) : 0;
}

// max(v, floor) that keeps a NaN (std::max's order): a NaN-sized roi samples nothing.
template <typename Acc>
OPKILN_HD Acc at_least(Acc v, Acc floor) { return v < floor ? floor : v; }

// g: any geometry with batch, height, width, pooled_height, pooled_width,
// sampling_ratio and aligned (an op's geometry struct on the CPU, its kernels' copy on CUDA).
// b, x1, y1, x2, y2: the roi's five values, already converted to Acc.
template <typename Acc, typename Geometry>
OPKILN_HD Roi<Acc> make_roi(Acc b, Acc x1, Acc y1, Acc x2, Acc y2, Acc scale, const Geometry& g) {
  Roi<Acc> roi;
  if (!batch_index_valid(b, g.batch) || g.height <= 0 || g.width <= 0) return roi;
  roi.valid = true;
  roi.batch = static_cast<std::int64_t>(b);
  const Acc offset = g.aligned ? Acc(0.5) : Acc(0);
  x1 = x1 * scale - offset;
  y1 = y1 * scale - offset;
  x2 = x2 * scale - offset;
  y2 = y2 * scale - offset;
  Acc roi_w = x2 - x1;
  Acc roi_h = y2 - y1;
  if (!g.aligned) {  // legacy rule: a roi is at least one pixel
    roi_w = at_least(roi_w, Acc(1));
    roi_h = at_least(roi_h, Acc(1));
  }
  roi.y0 = y1;
  roi.x0 = x1;
  roi.bin_h = roi_h / static_cast<Acc>(g.pooled_height);
  roi.bin_w = roi_w / static_cast<Acc>(g.pooled_width);
  roi.grid_h = g.sampling_ratio > 0 ? g.sampling_ratio : adaptive_grid(roi.bin_h);
  roi.grid_w = g.sampling_ratio > 0 ? g.sampling_ratio : adaptive_grid(roi.bin_w);
  roi.step_h = roi.grid_h > 0 ? roi.bin_h / static_cast<Acc>(roi.grid_h) : Acc(0);
  roi.step_w = roi.grid_w > 0 ? roi.bin_w / static_cast<Acc>(roi.grid_w) : Acc(0);
  const std::int64_t n = roi.grid_h * roi.grid_w;
  roi.count = static_cast<Acc>(n > 1 ? n : 1);
  return roi;
}

// The y of sample iy in bin row ph, and the x of sample ix in bin column pw.
template <typename Acc>
OPKILN_HD Acc sample_y(const Roi<Acc>& roi, std::int64_t ph, std::int64_t iy) {
  return roi.y0 + static_cast<Acc>(ph) * roi.bin_h + (static_cast<Acc>(iy) + Acc(0.5)) * roi.step_h;
}
template <typename Acc>
OPKILN_HD Acc sample_x(const Roi<Acc>& roi, std::int64_t pw, std::int64_t ix) {
  return roi.x0 + static_cast<Acc>(pw) * roi.bin_w + (static_cast<Acc>(ix) + Acc(0.5)) * roi.step_w;
}

// One bilinear sample: its taps and weights, read and scattered by common/bilinear.h.
template <typename Acc>
using Sample = bilinear::Sample<Acc>;

// torchvision's RoI boundary rules (the clamped rule of common/bilinear.h): a sample beyond one pixel outside the plane (or NaN)
// reads nothing; a negative coordinate is clamped to 0; at the last row or column both
// taps of that axis are the edge pixel.
template <typename Acc>
OPKILN_HD Sample<Acc> bilinear(std::int64_t height, std::int64_t width, Acc y, Acc x) {
  Sample<Acc> s;
  if (!(y >= Acc(-1) && y <= static_cast<Acc>(height) && x >= Acc(-1) && x <= static_cast<Acc>(width))) return s;
  y = at_least(y, Acc(0));
  x = at_least(x, Acc(0));
  std::int64_t y_lo = static_cast<std::int64_t>(y);
  std::int64_t x_lo = static_cast<std::int64_t>(x);
  std::int64_t y_hi = y_lo + 1;
  std::int64_t x_hi = x_lo + 1;
  if (y_lo >= height - 1) {
    y_lo = y_hi = height - 1;
    y = static_cast<Acc>(y_lo);
  }
  if (x_lo >= width - 1) {
    x_lo = x_hi = width - 1;
    x = static_cast<Acc>(x_lo);
  }
  s.valid = true;
  s.o1 = y_lo * width + x_lo;
  s.o2 = y_lo * width + x_hi;
  s.o3 = y_hi * width + x_lo;
  s.o4 = y_hi * width + x_hi;
  bilinear::set_weights(s, y - static_cast<Acc>(y_lo), x - static_cast<Acc>(x_lo));
  return s;
}

// The sample loop of a bin: f(sample) for every valid bilinear sample of bin (ph, pw) of `roi`'s grid,
// iy then ix (torchvision's order), in a plane of height x width.
template <typename Acc, typename F>
OPKILN_HD void for_each_sample(const Roi<Acc>& roi, std::int64_t ph, std::int64_t pw, std::int64_t height,
                               std::int64_t width, F&& f) {
  for (std::int64_t iy = 0; iy < roi.grid_h; ++iy) {
    const Acc y = sample_y(roi, ph, iy);
    for (std::int64_t ix = 0; ix < roi.grid_w; ++ix) {
      const Sample<Acc> s = bilinear(height, width, y, sample_x(roi, pw, ix));
      if (s.valid) f(s);
    }
  }
}

}  // namespace opkiln::kernels::roi_sampling
