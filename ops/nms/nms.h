// Greedy non-maximum suppression with torchvision.ops.nms semantics.
//
// Boxes are (x1, y1, x2, y2). Boxes are visited by decreasing score (ties:
// lower index first; NaN scores first, as torch.sort(descending=True) does;
// -0.0 == +0.0); a box is kept unless an already kept box overlaps it with
// IoU > iou_threshold (IoU exactly equal to the threshold does not suppress).
// IoU is computed in float32 for float32/float16/bfloat16 boxes (from the
// exactly upcast coordinates) and float64 for float64, and compared with the
// threshold in float64, as torchvision's CPU kernel does.
#pragma once

#include <cstddef>

#include "common/common.h"

namespace opkiln::kernels {

// boxes: [n, 4], scores: [n], both contiguous and of the same kind.
// Writes the kept indices (by decreasing score) to keep[0..count) and returns
// count; keep must hold n entries.
std::int64_t nms_cpu(ScalarKind kind, const void* boxes, const void* scores, std::int64_t n, double iou_threshold,
                     std::int64_t* keep);

// Device workspace (bytes) nms_cuda needs for n boxes of this kind.
std::size_t nms_cuda_workspace_bytes(ScalarKind kind, std::int64_t n);

// keep: device int64[n]; *count: host, set once the kernels finished (the
// only host synchronisation: the output size depends on the data).
CudaStatus nms_cuda(ScalarKind kind, const void* boxes, const void* scores, std::int64_t n, double iou_threshold,
                    void* workspace, std::size_t workspace_bytes, std::int64_t* keep, std::int64_t* count,
                    CudaStream stream);

}  // namespace opkiln::kernels
