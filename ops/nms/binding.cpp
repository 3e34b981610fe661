// opkiln::nms: schema, argument checks and kernel registrations, for both ABI
// modes (ops/facade/facade.h). The fake impl and batched_nms: python/opkiln/ops.py.
#include <limits>

#include "facade/facade.h"
#include "nms/nms.h"

namespace opkiln::nms_binding {
using namespace facade;

constexpr std::string_view kOp = "nms";

void check_args(const Tensor& boxes, const Tensor& scores, DeviceType device) {
  check_same_device(boxes, scores, kOp, "boxes", "scores");
  check_device(boxes, device, kOp, "boxes");
  OPKILN_CHECK(boxes.dim() == 2 && boxes.size(1) == 4,
               "opkiln::nms: boxes must have shape [N, 4] (x1, y1, x2, y2), got ", sizes(boxes));
  OPKILN_CHECK(scores.dim() == 1 && scores.size(0) == boxes.size(0),
               "opkiln::nms: scores must have shape [N] with N = boxes.shape[0] = ", boxes.size(0), ", got ",
               sizes(scores));
  float_kind(boxes, kOp, "boxes");
  check_same_dtype(boxes, scores, kOp, "boxes", "scores");
}

// keep[:count], as a tensor of its own (keep itself when nothing was suppressed).
Tensor first(const Tensor& keep, std::int64_t count) {
  return count == keep.size(0) ? keep : narrowed_copy(keep, 0, 0, count);
}

Tensor nms_cpu(const Tensor& boxes, const Tensor& scores, double iou_threshold) {
  check_args(boxes, scores, DeviceType::CPU);
  const Tensor bc = as_contiguous(boxes);
  const Tensor sc = as_contiguous(scores);
  const std::int64_t n = bc.size(0);
  Tensor keep = empty({n}, ScalarType::Long, bc);
  const std::int64_t count = kernels::nms_cpu(float_kind(bc, kOp, "boxes"), bc.const_data_ptr(), sc.const_data_ptr(),
                                              n, iou_threshold, keep.mutable_data_ptr<std::int64_t>());
  return first(keep, count);
}

#if OPKILN_WITH_CUDA
Tensor nms_cuda(const Tensor& boxes, const Tensor& scores, double iou_threshold) {
  check_args(boxes, scores, DeviceType::CUDA);
  const std::int64_t n = boxes.size(0);
  OPKILN_CHECK(n < std::numeric_limits<std::int32_t>::max(), "opkiln::nms: at most 2^31 - 2 boxes on CUDA, got ", n);
  const DeviceGuard guard(boxes);
  Tensor keep = empty({n}, ScalarType::Long, boxes);
  if (n == 0) return keep;
  const Tensor bc = as_contiguous(boxes);
  const Tensor sc = as_contiguous(scores);
  const ScalarKind kind = float_kind(bc, kOp, "boxes");
  const std::size_t bytes = kernels::nms_cuda_workspace_bytes(kind, n);
  Tensor workspace = empty({static_cast<std::int64_t>(bytes)}, ScalarType::Byte, boxes);
  std::int64_t count = 0;
  check_cuda(kernels::nms_cuda(kind, bc.const_data_ptr(), sc.const_data_ptr(), n, iou_threshold,
                               workspace.mutable_data_ptr(), bytes, keep.mutable_data_ptr<std::int64_t>(), &count,
                               cuda_stream(boxes)),
             kOp);
  return first(keep, count);
}
#endif

OPKILN_SCHEMAS(m) { m.def("nms(Tensor boxes, Tensor scores, float iou_threshold) -> Tensor"); }

OPKILN_KERNELS(CPU, m) { m.impl("nms", OPKILN_KERNEL(nms_cpu)); }

#if OPKILN_WITH_CUDA
OPKILN_KERNELS(CUDA, m) { m.impl("nms", OPKILN_KERNEL(nms_cuda)); }
#endif

}  // namespace opkiln::nms_binding
