// How CPU kernel cores split [begin, end) ranges of planes and own what they write
// (docs/adding-an-op.md: a range writes only inside itself, so the split is race-free and
// deterministic), with the 16-bit scratch of a backward that accumulates.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "common/half_float.h"

namespace opkiln::kernels::cpu {

// A range [begin, end) of items laid out in rows of `span` items (the K * C planes of a pooled
// output are K rows of C): f(row, lo, hi) for every row the range touches, [lo, hi) the part of
// the row inside the range, relative to the row's start. span > 0.
template <typename F>
void for_each_row_span(std::int64_t begin, std::int64_t end, std::int64_t span, F&& f) {
  for (std::int64_t row = begin / span; row * span < end; ++row) {
    f(row, std::max(begin, row * span) - row * span, std::min(end, (row + 1) * span) - row * span);
  }
}

// Floats of float32 scratch a 16-bit accumulation uses at most (it goes in chunks of planes).
constexpr std::int64_t kScratchFloats = std::int64_t{1} << 20;

// Overwrites the planes [c_begin, c_end) of `image` (plane: values per plane) with what
// add(c0, nc, target) accumulates into the zeroed planes [c0, c0 + nc) at `target`: the planes'
// own memory for float32/float64; for float16/bfloat16 a float32 scratch, rounded once.
template <typename T, typename F>
void overwrite_planes(T* image, std::int64_t c_begin, std::int64_t c_end, std::int64_t plane,
                      std::vector<float>& scratch, F&& add) {
  using Acc = decltype(Convert<T>::load(T{}));
  constexpr bool kDirect = std::is_same_v<T, Acc>;
  const std::int64_t chunk = kDirect ? c_end - c_begin : std::max<std::int64_t>(1, kScratchFloats / std::max<std::int64_t>(plane, 1));
  for (std::int64_t c0 = c_begin; c0 < c_end; c0 += chunk) {
    const std::int64_t nc = std::min(chunk, c_end - c0);
    T* planes = image + c0 * plane;
    if constexpr (kDirect) {
      std::fill(planes, planes + nc * plane, Acc(0));
      add(c0, nc, planes);
    } else {
      scratch.assign(static_cast<std::size_t>(nc * plane), 0.0f);
      add(c0, nc, scratch.data());
      for (std::int64_t i = 0; i < nc * plane; ++i) planes[i] = Convert<T>::store(scratch[i]);
    }
  }
}

}  // namespace opkiln::kernels::cpu
