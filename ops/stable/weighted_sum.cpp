#include "weighted_sum/weighted_sum.h"

#include "binding.h"

namespace opkiln::stable_binding {
namespace {

constexpr const char* kOp = "weighted_sum";

Tensor check_and_alloc(const Tensor& a, const Tensor& b, DeviceType device) {
  check_same_device(a, b, kOp, "a", "b");
  check_device(a, device, kOp, "a");
  check_same_dtype(a, b, kOp, "a", "b");
  float_kind(a, kOp, "a");
  OPKILN_CHECK(same_shape(a, b), "opkiln::weighted_sum: a and b must have the same shape, got ", shape_str(a),
                  " and ", shape_str(b));
  return empty_contiguous_like(a);
}

Tensor weighted_sum_cpu(Tensor a, Tensor b, double alpha) {
  Tensor out = check_and_alloc(a, b, DeviceType::CPU);
  const Tensor ac = torch::stable::contiguous(a);
  const Tensor bc = torch::stable::contiguous(b);
  const auto kind = float_kind(ac, kOp, "a");
  const void* pa = ac.const_data_ptr();
  const void* pb = bc.const_data_ptr();
  void* po = out.mutable_data_ptr();
  torch::stable::parallel_for(0, out.numel(), 32768, [&](std::int64_t begin, std::int64_t end) {
    kernels::weighted_sum_cpu(kind, pa, pb, po, begin, end, alpha);
  });
  return out;
}

#if OPKILN_WITH_CUDA
Tensor weighted_sum_cuda(Tensor a, Tensor b, double alpha) {
  Tensor out = check_and_alloc(a, b, DeviceType::CUDA);
  const torch::stable::accelerator::DeviceGuard guard(a.get_device_index());
  const Tensor ac = torch::stable::contiguous(a);
  const Tensor bc = torch::stable::contiguous(b);
  const kernels::CudaStream stream = current_cuda_stream(a.get_device_index());
  check_cuda_status(kernels::weighted_sum_cuda(float_kind(ac, kOp, "a"), ac.const_data_ptr(), bc.const_data_ptr(),
                                               out.mutable_data_ptr(), out.numel(), alpha, stream),
                    kOp);
  return out;
}
#endif

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(opkiln, CPU, m) { m.impl("weighted_sum", TORCH_BOX(&weighted_sum_cpu)); }

#if OPKILN_WITH_CUDA
STABLE_TORCH_LIBRARY_IMPL(opkiln, CUDA, m) { m.impl("weighted_sum", TORCH_BOX(&weighted_sum_cuda)); }
#endif

}  // namespace opkiln::stable_binding
