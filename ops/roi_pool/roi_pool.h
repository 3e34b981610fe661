// RoIPool with torchvision.ops.roi_pool semantics and argument order:
//   roi_pool(input[N, C, H, W], rois[K, 5], spatial_scale, pooled_height, pooled_width)
//     -> (output[K, C, PH, PW] of input's dtype, argmax[K, C, PH, PW] int32)
// A roi (common/roi.h) is scaled and rounded to whole pixels (half away from zero):
//   x1' = round(x1 * spatial_scale), ..., y2' = round(y2 * spatial_scale)
//   roi_w = max(x2' - x1' + 1, 1), roi_h likewise; bin = roi / pooled, in the storage dtype
//   bin (ph, pw) covers rows [floor(ph * bin_h), ceil((ph + 1) * bin_h)) + y1' (columns
//   likewise), clipped to the plane.
//   output = the bin's largest value (ties: the first in row-major order; NaN never wins),
//            0 for an empty bin; argmax = its index h * W + w in the plane, -1 for an empty bin.
// The backward adds grad_output[k, c, ph, pw] to grad_input[b, c] at argmax (nothing for -1, nor
// for an index outside the plane, which only a hand-made argmax holds): the exact adjoint of the
// forward's selection.
//
// Coordinates are float32 for float32/float16/bfloat16 data and float64 for float64 (rois have
// the dtype of input); bin sizes and bin edges are rounded to the storage dtype as torchvision's
// kernels compute them, so 16-bit bins match its edges. Pointers are to contiguous NCHW input,
// [K, 5] rois, [K, C, PH, PW] output/argmax/grad_output (the binding makes them contiguous).
// Batch index contract: common/roi.h (an invalid roi pools nothing and gives no gradient; the
// binding rejects it first, with facade/rois.h's check_batch_index).
//
// Errors the binding raises (tests/ops/test_roi_pool.py matches these substrings; the rois'
// checks are facade/rois.h's, shared with roi_align):
//   [ValueError]   "opkiln::roi_pool: rois[<k>, 0] = <value> is a batch index out of range [0, <N>)"
//   [RuntimeError] "opkiln::roi_pool: rois must have shape [K, 5] (batch index, x1, y1, x2, y2), got [...]"
//   [RuntimeError] "opkiln::roi_pool: input must have shape [N, C, H, W], got [...]"
//   [ValueError]   "opkiln::roi_pool: pooled_height and pooled_width must be >= 0, got <PH> and <PW>"
//   [RuntimeError] dtypes, devices: check_same_dtype, float_kind, check_same_device
//   [RuntimeError] "opkiln::_roi_pool_backward: argmax must be int32 of grad's shape ..."
#pragma once

#include <cstdint>

#include "common/common.h"
#include "common/roi.h"

namespace opkiln::kernels {

// Output planes [begin, end) of the K * C planes (k * C + c), each PH * PW values and argmaxes.
void roi_pool_cpu(ScalarKind kind, const RoiShape& s, const void* input, const void* rois, void* output,
                  std::int32_t* argmax, std::int64_t begin, std::int64_t end);

// One thread per output element; no host synchronisation.
CudaStatus roi_pool_cuda(ScalarKind kind, const RoiShape& s, const void* input, const void* rois, void* output,
                         std::int32_t* argmax, CudaStream stream);

// grad_input planes [begin, end) of the N * C planes (b * C + c), OVERWRITTEN (grad_input may
// come uninitialised): each takes the gradients of the bins of every roi of batch b that chose
// one of its elements, in roi order; float16/bfloat16 add in float32 and are rounded once.
void roi_pool_backward_cpu(ScalarKind kind, const RoiShape& s, const void* grad_output, const void* rois,
                           const std::int32_t* argmax, void* grad_input, std::int64_t begin, std::int64_t end);

// atomicAdd into grad_input through common/cuda_scatter.cuh: the workspace is
// scatter_workspace_bytes(kind, N * C * H * W) (float32 for float16/bfloat16, none otherwise).
CudaStatus roi_pool_backward_cuda(ScalarKind kind, const RoiShape& s, const void* grad_output, const void* rois,
                                  const std::int32_t* argmax, void* grad_input, void* workspace,
                                  std::size_t workspace_bytes, CudaStream stream);

}  // namespace opkiln::kernels
