// RoIPool's bins (torchvision's rules, roi_pool.h), shared by the CPU and CUDA cores so both
// cut every roi into the same windows. Plain C++; host/device qualified under nvcc.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/host_device.h"
#include "common/roi.h"

namespace opkiln::kernels::roi_pool_bins {

template <typename Acc>
struct Roi {
  bool valid = false;  // the batch index is in range
  std::int64_t batch = 0, x0 = 0, y0 = 0;
  Acc bin_h = 0, bin_w = 0;  // already rounded to the storage dtype (Round below)
  Acc lowest = 0;            // where a window's max starts: torchvision's -FLT_MAX in the storage dtype
};

// Round(v): v rounded to the storage dtype and back (identity for float32/float64), as
// torchvision computes bin sizes and edges in its scalar_t.
template <typename Acc, typename Round>
OPKILN_HD Roi<Acc> make_roi(Acc b, Acc x1, Acc y1, Acc x2, Acc y2, Acc scale, std::int64_t batch,
                            std::int64_t pooled_height, std::int64_t pooled_width, Round round) {
  Roi<Acc> roi;
  if (!batch_index_valid(b, batch)) return roi;
  roi.valid = true;
  roi.batch = static_cast<std::int64_t>(b);
  roi.x0 = round_pixel(x1 * scale);
  roi.y0 = round_pixel(y1 * scale);
  const std::int64_t w = round_pixel(x2 * scale) - roi.x0 + 1;
  const std::int64_t h = round_pixel(y2 * scale) - roi.y0 + 1;
  roi.bin_w = round(static_cast<Acc>(w > 1 ? w : 1) / static_cast<Acc>(pooled_width));
  roi.bin_h = round(static_cast<Acc>(h > 1 ? h : 1) / static_cast<Acc>(pooled_height));
  return roi;
}

// The half-open window [lo, hi) of bin p along one axis: offset + [floor(p * bin), ceil((p + 1) * bin)),
// clipped to [0, size).
struct Span {
  std::int64_t lo, hi;
};

template <typename Acc, typename Round>
OPKILN_HD Span span(std::int64_t p, Acc bin, std::int64_t offset, std::int64_t size, Round round) {
  const auto clip = [size](std::int64_t v) { return v < 0 ? std::int64_t{0} : (v > size ? size : v); };
  const auto lo = static_cast<std::int64_t>(std::floor(round(static_cast<Acc>(p) * bin)));
  const auto hi = static_cast<std::int64_t>(std::ceil(round(static_cast<Acc>(p + 1) * bin)));
  return {clip(lo + offset), clip(hi + offset)};
}

// The largest value of a plane's window and its index (row-major first on ties; NaN never wins),
// starting from `best` ({lowest, -1}); (0, -1) when the window is empty. load(offset): the
// plane's value at offset h * width + w.
template <typename Acc>
struct Max {
  Acc value;
  std::int32_t index;
};

template <typename Acc, typename Load>
OPKILN_HD Max<Acc> window_max(Max<Acc> best, Span rows, Span cols, std::int64_t width, Load&& load) {
  if (rows.hi <= rows.lo || cols.hi <= cols.lo) return {Acc(0), -1};
  // Branch-free (a mask for the index, a max for the value): faster on unordered data than a
  // mispredicted branch per element, which is what GCC made of `if (v > best) best = ...` here.
  Acc value = best.value;
  std::int32_t index = best.index;
  for (std::int64_t h = rows.lo; h < rows.hi; ++h) {
    const std::int64_t row = h * width;
    for (std::int64_t w = cols.lo; w < cols.hi; ++w) {
      const Acc v = load(row + w);
      const std::int32_t take = -static_cast<std::int32_t>(v > value);  // all ones or zero (NaN: zero)
      index ^= (index ^ static_cast<std::int32_t>(row + w)) & take;     // take ? row + w : index
      value = value < v ? v : value;
    }
  }
  return {value, index};
}

}  // namespace opkiln::kernels::roi_pool_bins
