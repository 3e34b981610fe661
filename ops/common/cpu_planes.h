// How CPU kernel cores split [begin, end) ranges of planes and own what they write
// (docs/adding-an-op.md: a range writes only inside itself, so the split is race-free and
// deterministic), with the 16-bit scratch of a backward that accumulates.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "common/half_float.h"
#include "common/roi.h"

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
// kZero = false: add zeroes each plane itself before its first add (a plane zeroed just before it
// is used is in cache: one pass over memory fewer); the scratch is zeroed either way.
template <bool kZero = true, typename T, typename F>
void overwrite_planes(T* image, std::int64_t c_begin, std::int64_t c_end, std::int64_t plane,
                      std::vector<float>& scratch, F&& add) {
  using Acc = decltype(Convert<T>::load(T{}));
  constexpr bool kDirect = std::is_same_v<T, Acc>;
  const std::int64_t chunk = kDirect ? c_end - c_begin : std::max<std::int64_t>(1, kScratchFloats / std::max<std::int64_t>(plane, 1));
  for (std::int64_t c0 = c_begin; c0 < c_end; c0 += chunk) {
    const std::int64_t nc = std::min(chunk, c_end - c0);
    T* planes = image + c0 * plane;
    if constexpr (kDirect) {
      if constexpr (kZero) std::fill(planes, planes + nc * plane, Acc(0));
      add(c0, nc, planes);
    } else {
      scratch.assign(static_cast<std::size_t>(nc * plane), 0.0f);
      add(c0, nc, scratch.data());
      for (std::int64_t i = 0; i < nc * plane; ++i) planes[i] = Convert<T>::store(scratch[i]);
    }
  }
}

// The backward of an RoI op whose threads own whole grad_input planes: for every image b whose
// planes the range [begin, end) of the N * C planes (b * C + c) touches, the rois of b in roi
// order (load_roi(k): roi k, with .valid and .batch) and their indices, then
// add(c0, nc, target, rois, ids) accumulates into the zeroed planes [c0, c0 + nc) of image b
// (overwrite_planes: float32 scratch for 16-bit T; kZero as there).
template <typename Roi, bool kZero = true, typename T, typename LoadRoi, typename Add>
void overwrite_roi_planes(T* grad_input, std::int64_t begin, std::int64_t end, std::int64_t channels,
                          std::int64_t plane, std::int64_t num_rois, LoadRoi&& load_roi, Add&& add) {
  std::vector<float> scratch;
  std::vector<Roi> rois;
  std::vector<std::int64_t> ids;
  for_each_row_span(begin, end, channels, [&](std::int64_t b, std::int64_t c_begin, std::int64_t c_end) {
    rois.clear();
    ids.clear();
    for (std::int64_t k = 0; k < num_rois; ++k) {
      const Roi roi = load_roi(k);
      if (roi.valid && roi.batch == b) {
        rois.push_back(roi);
        ids.push_back(k);
      }
    }
    overwrite_planes<kZero>(grad_input + b * channels * plane, c_begin, c_end, plane, scratch,
                     [&](std::int64_t c0, std::int64_t nc, auto* target) { add(c0, nc, target, rois, ids); });
  });
}

// A RoI op's CPU kernel for one storage dtype T: its conversions (C, Acc), the tensors it reads
// (`in`: input or grad_output; `rois`) and writes (`out`: output or grad_input), and the sizes of
// an input plane and of a pooled plane.
template <typename T_>
struct RoiKernel {
  using T = T_;
  using C = Convert<T>;
  using Acc = decltype(C::load(T{}));
  const T* in;
  const T* rois;
  T* out;
  std::int64_t plane, bins;

  static Acc load(T v) { return C::load(v); }
  static T store(Acc v) { return C::store(v); }

  // f(b, x1, y1, x2, y2) of roi k (f(each of its Columns values)), as Acc values.
  template <std::int64_t Columns = kRoiColumns, typename F>
  auto roi(std::int64_t k, F&& f) const {
    return with_roi<Columns>(rois, k, [](T v) { return C::load(v); }, f);
  }
};

// f.template operator()<X>(X x), X = RoiKernel<T> for the storage dtype T of `kind`; g: a geometry with height, width,
// pooled_height and pooled_width.
template <typename Geometry, typename F>
void dispatch_roi_kernel(ScalarKind kind, const Geometry& g, const void* in, const void* rois, void* out, F&& f) {
  dispatch_float_kinds(static_cast<int>(kind), [&]<typename T>() {
    const RoiKernel<T> x{static_cast<const T*>(in), static_cast<const T*>(rois), static_cast<T*>(out),
                         g.height * g.width, g.pooled_height * g.pooled_width};
    f.template operator()<RoiKernel<T>>(x);
  });
}

// The CPU backward of a RoI op over grad_input planes [begin, end) of the N * C planes, each
// overwritten by the thread that owns it (overwrite_roi_planes): make_roi(x, k) is roi k (x: the
// RoiKernel), and body(x, c_begin, nc, target, rois, ids) accumulates into the zeroed planes
// [c_begin, c_begin + nc) of one image at target, from that image's rois (in roi order) and their ids
// (kZero = false: body zeroes each plane before its first add, overwrite_planes).
template <bool kZero = true, typename Geometry, typename MakeRoi, typename Body>
void roi_backward_planes(ScalarKind kind, const Geometry& g, const void* grad_output, const void* rois,
                         void* grad_input, std::int64_t begin, std::int64_t end, MakeRoi&& make_roi, Body&& body) {
  if (begin >= end || g.channels <= 0) return;
  dispatch_roi_kernel(kind, g, grad_output, rois, grad_input, [&]<typename X>(const X& x) {
    using Roi = decltype(make_roi(x, std::int64_t{0}));
    overwrite_roi_planes<Roi, kZero>(x.out, begin, end, g.channels, x.plane, g.rois,
                              [&](std::int64_t k) { return make_roi(x, k); },
                              [&](std::int64_t c_begin, std::int64_t nc, auto* target, const std::vector<Roi>& rs,
                                  const std::vector<std::int64_t>& ids) { body(x, c_begin, nc, target, rs, ids); });
  });
}

}  // namespace opkiln::kernels::cpu
