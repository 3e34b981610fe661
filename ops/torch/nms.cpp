#include "nms/nms.h"

#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <limits>

#include "binding.h"

namespace opkiln::binding {
namespace nms_impl {

constexpr std::string_view kOp = "nms";

void check_args(const at::Tensor& boxes, const at::Tensor& scores, c10::DeviceType device) {
  check_same_device(boxes, scores, kOp, "boxes", "scores");
  check_device(boxes, device, kOp, "boxes");
  TORCH_CHECK(boxes.dim() == 2 && boxes.size(1) == 4, "opkiln::nms: boxes must have shape [N, 4] (x1, y1, x2, y2), ",
              "got ", boxes.sizes());
  TORCH_CHECK(scores.dim() == 1 && scores.size(0) == boxes.size(0), "opkiln::nms: scores must have shape [N] with ",
              "N = boxes.shape[0] = ", boxes.size(0), ", got ", scores.sizes());
  float_kind(boxes, kOp, "boxes");
  check_same_dtype(boxes, scores, kOp, "boxes", "scores");
}

at::Tensor nms_cpu(const at::Tensor& boxes, const at::Tensor& scores, double iou_threshold) {
  check_args(boxes, scores, c10::DeviceType::CPU);
  const at::Tensor bc = boxes.contiguous();
  const at::Tensor sc = scores.contiguous();
  const std::int64_t n = bc.size(0);
  at::Tensor keep = at::empty({n}, bc.options().dtype(at::kLong));
  const std::int64_t count = kernels::nms_cpu(float_kind(bc, kOp, "boxes"), bc.const_data_ptr(), sc.const_data_ptr(),
                                              n, iou_threshold, keep.mutable_data_ptr<std::int64_t>());
  return count == n ? keep : keep.narrow(0, 0, count).clone();
}

#if OPKILN_WITH_CUDA
at::Tensor nms_cuda(const at::Tensor& boxes, const at::Tensor& scores, double iou_threshold) {
  check_args(boxes, scores, c10::DeviceType::CUDA);
  const std::int64_t n = boxes.size(0);
  TORCH_CHECK(n < std::numeric_limits<std::int32_t>::max(), "opkiln::nms: at most 2^31 - 2 boxes on CUDA, got ", n);
  const c10::cuda::CUDAGuard guard(boxes.device());
  at::Tensor keep = at::empty({n}, boxes.options().dtype(at::kLong));
  if (n == 0) return keep;
  const at::Tensor bc = boxes.contiguous();
  const at::Tensor sc = scores.contiguous();
  const auto kind = float_kind(bc, kOp, "boxes");
  const std::size_t bytes = kernels::nms_cuda_workspace_bytes(kind, n);
  at::Tensor workspace = at::empty({static_cast<std::int64_t>(bytes)}, boxes.options().dtype(at::kByte));
  std::int64_t count = 0;
  check_cuda_status(kernels::nms_cuda(kind, bc.const_data_ptr(), sc.const_data_ptr(), n, iou_threshold,
                                      workspace.mutable_data_ptr(), bytes, keep.mutable_data_ptr<std::int64_t>(),
                                      &count, current_stream()),
                    kOp);
  return count == n ? keep : keep.narrow(0, 0, count).clone();
}
#endif

}  // namespace nms_impl
TORCH_LIBRARY_IMPL(opkiln, CPU, m) { m.impl("nms", &nms_impl::nms_cpu); }

#if OPKILN_WITH_CUDA
TORCH_LIBRARY_IMPL(opkiln, CUDA, m) { m.impl("nms", &nms_impl::nms_cuda); }
#endif

}  // namespace opkiln::binding
