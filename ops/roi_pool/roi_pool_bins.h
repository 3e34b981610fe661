// RoIPool's bins (torchvision's rules, roi_pool.h), shared by the CPU and CUDA cores so both
// cut every roi into the same windows. Plain C++; host/device qualified under nvcc.
#pragma once

#include <array>
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

// CPU only (common/roi_family_cpu.h folds G channel planes side by side).
#if !defined(__CUDACC__)
// window_max of G planes at once (load(i, offset): plane i's value), each plane's exactly as alone:
// G independent max chains interleaved element by element, so the CPU overlaps them (one plane's
// chain is a compare and a max per element, latency-bound).
template <int G, typename Acc, typename Load>
void window_max_planes(std::array<Max<Acc>, G>& best, Span rows, Span cols, std::int64_t width, Load&& load) {
  if (rows.hi <= rows.lo || cols.hi <= cols.lo) {
    for (int i = 0; i < G; ++i) best[i] = {Acc(0), -1};
    return;
  }
  Acc value[G];
  std::int32_t index[G];
  for (int i = 0; i < G; ++i) {
    value[i] = best[i].value;
    index[i] = best[i].index;
  }
  for (std::int64_t h = rows.lo; h < rows.hi; ++h) {
    const std::int64_t row = h * width;
    for (std::int64_t w = cols.lo; w < cols.hi; ++w) {
      const auto at = static_cast<std::int32_t>(row + w);
      for (int i = 0; i < G; ++i) {
        const Acc v = load(i, row + w);
        const std::int32_t take = -static_cast<std::int32_t>(v > value[i]);
        index[i] ^= (index[i] ^ at) & take;
        value[i] = value[i] < v ? v : value[i];
      }
    }
  }
  for (int i = 0; i < G; ++i) best[i] = {value[i], index[i]};
}

// window_max_planes of G float planes (G a multiple of 4) in vectors of 4 lanes (GCC/Clang vector
// extensions: SSE on x86-64, NEON on aarch64): lane i is plane i's chain, with the same compare and
// select per element as window_max, so each plane's result is the same bit for bit.
template <int G, typename Load>
void window_max_vec(std::array<Max<float>, G>& best, Span rows, Span cols, std::int64_t width, Load&& load) {
  static_assert(G % 4 == 0);
  constexpr int V = G / 4;
  using F4 = float __attribute__((vector_size(16)));
  using I4 = std::int32_t __attribute__((vector_size(16)));
  if (rows.hi <= rows.lo || cols.hi <= cols.lo) {
    for (auto& b : best) b = {0.0f, -1};
    return;
  }
  F4 value[V];
  I4 index[V];
  for (int j = 0; j < V; ++j) {
    value[j] = F4{best[4 * j].value, best[4 * j + 1].value, best[4 * j + 2].value, best[4 * j + 3].value};
    index[j] = I4{best[4 * j].index, best[4 * j + 1].index, best[4 * j + 2].index, best[4 * j + 3].index};
  }
  for (std::int64_t h = rows.lo; h < rows.hi; ++h) {
    const std::int64_t row = h * width;
    for (std::int64_t w = cols.lo; w < cols.hi; ++w) {
      const std::int64_t o = row + w;
      for (int j = 0; j < V; ++j) {
        const F4 v = {load(4 * j, o), load(4 * j + 1, o), load(4 * j + 2, o), load(4 * j + 3, o)};
        const I4 take = v > value[j];  // all ones or zero per lane (NaN: zero)
        index[j] ^= (index[j] ^ static_cast<std::int32_t>(o)) & take;
        value[j] = take ? v : value[j];
      }
    }
  }
  for (int i = 0; i < G; ++i) best[i] = {value[i / 4][i % 4], index[i / 4][i % 4]};
}
#endif

}  // namespace opkiln::kernels::roi_pool_bins
