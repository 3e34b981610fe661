// RoIAlign with torchvision.ops.roi_align semantics and argument order:
//   roi_align(input[N, C, H, W], rois[K, 5], spatial_scale, pooled_height, pooled_width,
//             sampling_ratio, aligned) -> output[K, C, PH, PW]
// A roi is (batch index, x1, y1, x2, y2) in input coordinates before spatial_scale.
//   offset = aligned ? 0.5 : 0;  start = coord * spatial_scale - offset
//   roi_w = x2' - x1', roi_h = y2' - y1'; not aligned: both clamped to >= 1
//   bin = roi / pooled;  grid = sampling_ratio > 0 ? sampling_ratio : ceil(roi / pooled)
//     (an adaptive grid of a NaN, infinite or over-2^31 bin has no samples: output 0)
//   output[k, c, ph, pw] = sum over the grid_h * grid_w samples at
//     y = y1' + ph * bin_h + (iy + 0.5) * bin_h / grid_h (x likewise) of bilinear(input[b, c], y, x),
//     divided by max(grid_h * grid_w, 1)
//   bilinear: 0 when y < -1 or y > H or x < -1 or x > W; else y, x clamped to >= 0, and a
//     sample at or past the last row/column reads that row/column.
// The backward scatters grad_output[k, c, ph, pw] / count with the same bilinear weights
// (a weight falls where the forward read), so it is the exact adjoint of the forward.
//
// Arithmetic (coordinates, weights, sums) is float32 for float32/float16/bfloat16 data and
// float64 for float64; rois have the dtype of input. Pointers are to contiguous NCHW input,
// contiguous [K, 5] rois, contiguous [K, C, PH, PW] output/grad_output (the binding makes
// them contiguous).
//
// Batch index contract: common/roi.h (an invalid roi gets a zero output and gives no gradient;
// the binding rejects it first, forward and backward, with facade/rois.h's check_batch_index).
//
// Errors the binding raises (tests/ops/test_roi_align.py matches these substrings; the error
// type in the per-torch build in brackets, RuntimeError for all in the stable ABI):
//   [ValueError]   "opkiln::roi_align: rois[<k>, 0] = <value> is a batch index out of range [0, <N>)"
//   [RuntimeError] "opkiln::roi_align: rois must have shape [K, 5] (batch index, x1, y1, x2, y2), got [...]"
//   [RuntimeError] "opkiln::roi_align: input must have shape [N, C, H, W], got [...]"
//   [ValueError]   "opkiln::roi_align: pooled_height and pooled_width must be positive, got <PH> and <PW>"
//   [TypeError]    dtypes differ: check_same_dtype(input, rois): "... ; cast one of them"
//   [TypeError]    not a float dtype: float_kind: "... must be float32, float64, float16 or bfloat16"
//   [RuntimeError] devices differ: check_same_device(input, rois): "...; move both to the same device"
// spatial_scale and sampling_ratio take any value (as in torchvision).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/common.h"
#include "common/roi.h"

namespace opkiln::kernels {

struct RoiAlignGeometry : RoiShape {
  std::int64_t sampling_ratio = -1;  // <= 0: adaptive, ceil(roi size / pooled size)
  bool aligned = false;
};

// Output planes [begin, end) of the K * C planes (k * C + c); each plane is PH * PW values.
// Ranges may split a roi's channels anywhere; disjoint ranges run in parallel safely.
void roi_align_forward_cpu(ScalarKind kind, const RoiAlignGeometry& g, const void* input, const void* rois,
                           void* output, std::int64_t begin, std::int64_t end);

// Input planes [begin, end) of the N * C planes of grad_input (b * C + c). For each plane
// the kernel OVERWRITES it (zeroes it, then adds the contribution of every roi of batch b),
// so grad_input may come uninitialised (torch.empty), and each plane is written by the
// thread that owns its range only: parallel and deterministic, no atomics. Half/bfloat16
// planes accumulate in a float32 scratch plane and are rounded once.
void roi_align_backward_cpu(ScalarKind kind, const RoiAlignGeometry& g, const void* grad_output, const void* rois,
                            void* grad_input, std::int64_t begin, std::int64_t end);

// One thread per output element; no host synchronisation.
CudaStatus roi_align_forward_cuda(ScalarKind kind, const RoiAlignGeometry& g, const void* input, const void* rois,
                                  void* output, CudaStream stream);

// The backward scatters with atomicAdd through common/cuda_scatter.cuh: its workspace is
// scatter_workspace_bytes(kind, N * C * H * W) (common/common.h; float32 for float16/bfloat16,
// none otherwise). The kernel zeroes grad_input / the workspace itself, on the stream.
// float64 atomics make the summation order vary run to run at the 1e-16 level (fine for
// gradcheck); float32 results may differ in the last bits between runs.
CudaStatus roi_align_backward_cuda(ScalarKind kind, const RoiAlignGeometry& g, const void* grad_output,
                                   const void* rois, void* grad_input, void* workspace, std::size_t workspace_bytes,
                                   CudaStream stream);

}  // namespace opkiln::kernels
