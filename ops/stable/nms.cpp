// Stable-ABI binding of nms, mirroring ops/torch/nms.cpp.
#include "nms/nms.h"

#include <limits>

#include "binding.h"

namespace opkiln::stable_binding {
namespace {

constexpr const char* kOp = "nms";

void check_args(const Tensor& boxes, const Tensor& scores, DeviceType device) {
  check_same_device(boxes, scores, kOp, "boxes", "scores");
  check_device(boxes, device, kOp, "boxes");
  OPKILN_CHECK(boxes.dim() == 2 && boxes.size(1) == 4,
                  "opkiln::nms: boxes must have shape [N, 4] (x1, y1, x2, y2), got ", shape_str(boxes));
  OPKILN_CHECK(scores.dim() == 1 && scores.size(0) == boxes.size(0),
                  "opkiln::nms: scores must have shape [N] with N = boxes.shape[0] = ", boxes.size(0), ", got ",
                  shape_str(scores));
  float_kind(boxes, kOp, "boxes");
  check_same_dtype(boxes, scores, kOp, "boxes", "scores");
}

Tensor empty_indices(std::int64_t n, const Tensor& like) {
  return torch::stable::empty({n}, ScalarType::Long, std::nullopt, like.device());
}

// keep[:count], as a tensor of its own (keep itself when nothing was suppressed).
Tensor first(Tensor keep, std::int64_t count) {
  return count == keep.size(0) ? keep : torch::stable::clone(torch::stable::narrow(keep, 0, 0, count));
}

Tensor nms_cpu(Tensor boxes, Tensor scores, double iou_threshold) {
  check_args(boxes, scores, DeviceType::CPU);
  const Tensor bc = torch::stable::contiguous(boxes);
  const Tensor sc = torch::stable::contiguous(scores);
  const std::int64_t n = bc.size(0);
  Tensor keep = empty_indices(n, bc);
  const std::int64_t count = kernels::nms_cpu(float_kind(bc, kOp, "boxes"), bc.const_data_ptr(), sc.const_data_ptr(),
                                              n, iou_threshold, keep.mutable_data_ptr<std::int64_t>());
  return first(keep, count);
}

#if OPKILN_WITH_CUDA
Tensor nms_cuda(Tensor boxes, Tensor scores, double iou_threshold) {
  check_args(boxes, scores, DeviceType::CUDA);
  const std::int64_t n = boxes.size(0);
  OPKILN_CHECK(n < std::numeric_limits<std::int32_t>::max(), "opkiln::nms: at most 2^31 - 2 boxes on CUDA, got ",
                  n);
  const torch::stable::accelerator::DeviceGuard guard(boxes.get_device_index());
  Tensor keep = empty_indices(n, boxes);
  if (n == 0) return keep;
  const Tensor bc = torch::stable::contiguous(boxes);
  const Tensor sc = torch::stable::contiguous(scores);
  const auto kind = float_kind(bc, kOp, "boxes");
  const std::size_t bytes = kernels::nms_cuda_workspace_bytes(kind, n);
  Tensor workspace =
      torch::stable::empty({static_cast<std::int64_t>(bytes)}, ScalarType::Byte, std::nullopt, boxes.device());
  std::int64_t count = 0;
  check_cuda_status(kernels::nms_cuda(kind, bc.const_data_ptr(), sc.const_data_ptr(), n, iou_threshold,
                                      workspace.mutable_data_ptr(), bytes, keep.mutable_data_ptr<std::int64_t>(),
                                      &count, current_cuda_stream(boxes.get_device_index())),
                    kOp);
  return first(keep, count);
}
#endif

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(opkiln, CPU, m) { m.impl("nms", TORCH_BOX(&nms_cpu)); }

#if OPKILN_WITH_CUDA
STABLE_TORCH_LIBRARY_IMPL(opkiln, CUDA, m) { m.impl("nms", TORCH_BOX(&nms_cuda)); }
#endif

}  // namespace opkiln::stable_binding
