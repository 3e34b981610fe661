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

#include "common/common.h"
#include "common/host_device.h"

namespace opkiln::kernels {

constexpr std::int64_t kRoiColumns = 5;

// f(b, x1, y1, x2, y2) of roi k of a contiguous [K, 5] rois array, each value through load (the
// storage dtype's conversion to the kernels' arithmetic type).
template <typename T, typename Load, typename F>
OPKILN_HD auto with_roi(const T* rois, std::int64_t k, Load load, F&& f) {
  const T* r = rois + k * kRoiColumns;
  return f(load(r[0]), load(r[1]), load(r[2]), load(r[3]), load(r[4]));
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

// Index of the first of num_rois rois whose batch index is out of range, or -1 if none.
std::int64_t first_bad_roi_cpu(ScalarKind kind, const void* rois, std::int64_t num_rois, std::int64_t batch);

// Device bytes first_bad_roi_cuda needs as its workspace.
constexpr std::size_t kFirstBadRoiWorkspaceBytes = 8;

// Writes the index of the first roi with a bad batch index, or -1, to *first_bad (host
// memory). Synchronises the stream once (the answer decides whether to raise).
CudaStatus first_bad_roi_cuda(ScalarKind kind, const void* rois, std::int64_t num_rois, std::int64_t batch,
                              void* workspace, std::int64_t* first_bad, CudaStream stream);

}  // namespace opkiln::kernels
