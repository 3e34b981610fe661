// What every RoI op shares (roi_align, roi_pool and the next one): the rois' layout, the batch
// index contract and the kernels that check it, and where an element of a pooled output lies.
//
// A roi is one row of a contiguous [K, 5] tensor, (batch index, x1, y1, x2, y2), in the dtype of
// the features. torchvision truncates rois[k, 0] to an integer; a roi is valid when that integer
// is in [0, N), i.e. when -1 < rois[k, 0] < N (NaN is invalid). A kernel never reads out of bounds:
// a roi with an invalid index gets a zero output and gives no gradient, and the binding rejects
// it with a clear error before any kernel runs (facade/rois.h: check_batch_index).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "common/common.h"
#include "common/host_device.h"

namespace opkiln::kernels {

// torchvision's layout; a family member may read another (common/roi_family.h: kBoxColumns), column
// 0 always the batch index.
constexpr std::int64_t kRoiColumns = 5;

// f(b, x1, y1, x2, y2) of roi k of a contiguous [K, 5] rois array (f(column 0, ..., column
// Columns - 1) of a [K, Columns] one), each value through load (the storage dtype's conversion
// to the kernels' arithmetic type).
template <std::int64_t Columns = kRoiColumns, typename T, typename Load, typename F>
OPKILN_HD auto with_roi(const T* rois, std::int64_t k, Load load, F&& f) {
  static_assert(Columns >= 1, "a roi's column 0 is its batch index");
  const T* r = rois + k * Columns;
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    return f(load(r[I])...);
  }(std::make_index_sequence<static_cast<std::size_t>(Columns)>{});
}

// trunc(v) in [0, batch), as torchvision's int cast of the batch index; false for NaN.
template <typename Acc>
OPKILN_HD bool batch_index_valid(Acc v, std::int64_t batch) {
  return v > Acc(-1) && v < static_cast<Acc>(batch);
}

// round(v) as torchvision's int conversion of a rounded coordinate (roi_pool, ps_roi_pool): half away
// from zero as std::round, kept in +-2^30 so that no later sum overflows (NaN: 0; torchvision's int
// conversion of such values is undefined).
template <typename Acc>
OPKILN_HD std::int64_t round_pixel(Acc v) {
  const Acc limit = Acc(1 << 30);
  if (!(v == v)) return 0;
  const Acc r = std::round(v);
  return static_cast<std::int64_t>(r < -limit ? -limit : (r > limit ? limit : r));
}

// The sizes an RoI op's kernels share: features [N, C, H, W], rois [K, 5], a pooled output
// [K, C, PH, PW], and the scale from roi coordinates to feature pixels.
struct RoiShape {
  std::int64_t batch = 0;     // N
  std::int64_t channels = 0;  // C
  std::int64_t height = 0;    // H
  std::int64_t width = 0;     // W
  std::int64_t rois = 0;      // K
  std::int64_t pooled_height = 0;
  std::int64_t pooled_width = 0;
  double spatial_scale = 1.0;
};

// Where element i of a contiguous [K, C, PH, PW] pooled output (or its gradient) lies.
struct PooledIndex {
  std::int64_t roi, channel, ph, pw;
};

struct PooledShape {
  std::int64_t channels, pooled_height, pooled_width;
};

OPKILN_HD PooledIndex pooled_index(std::int64_t i, const PooledShape& s) {
  const std::int64_t bins = s.pooled_height * s.pooled_width;
  return {i / (bins * s.channels), (i / bins) % s.channels, (i / s.pooled_width) % s.pooled_height,
          i % s.pooled_width};
}

// Index of the first of num_rois rois (rows of `columns` values, column 0 the batch index) whose
// batch index is out of range, or -1 if none.
std::int64_t first_bad_roi_cpu(ScalarKind kind, const void* rois, std::int64_t num_rois, std::int64_t columns,
                               std::int64_t batch);

// Device bytes first_bad_roi_cuda needs as its workspace.
constexpr std::size_t kFirstBadRoiWorkspaceBytes = 8;

// Writes the index of the first roi with a bad batch index, or -1, to *first_bad (host
// memory). Synchronises the stream once (the answer decides whether to raise).
CudaStatus first_bad_roi_cuda(ScalarKind kind, const void* rois, std::int64_t num_rois, std::int64_t columns,
                              std::int64_t batch, void* workspace, std::int64_t* first_bad, CudaStream stream);

}  // namespace opkiln::kernels
