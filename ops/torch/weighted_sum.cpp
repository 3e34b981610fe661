#include "weighted_sum/weighted_sum.h"

#include <ATen/Parallel.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include "binding.h"

namespace opkiln::binding {
namespace weighted_sum_impl {

constexpr std::string_view kOp = "weighted_sum";

at::Tensor check_and_alloc(const at::Tensor& a, const at::Tensor& b, c10::DeviceType device) {
  check_same_device(a, b, kOp, "a", "b");
  check_device(a, device, kOp, "a");
  check_same_dtype(a, b, kOp, "a", "b");
  float_kind(a, kOp, "a");
  TORCH_CHECK(a.sizes() == b.sizes(), "opkiln::weighted_sum: a and b must have the same shape, got ", a.sizes(),
              " and ", b.sizes());
  return at::empty_like(a, at::MemoryFormat::Contiguous);
}

at::Tensor weighted_sum_cpu(const at::Tensor& a, const at::Tensor& b, double alpha) {
  at::Tensor out = check_and_alloc(a, b, c10::DeviceType::CPU);
  const at::Tensor ac = a.contiguous();
  const at::Tensor bc = b.contiguous();
  const auto kind = float_kind(ac, kOp, "a");
  const void* pa = ac.const_data_ptr();
  const void* pb = bc.const_data_ptr();
  void* po = out.mutable_data_ptr();
  at::parallel_for(0, out.numel(), 32768, [&](std::int64_t begin, std::int64_t end) {
    kernels::weighted_sum_cpu(kind, pa, pb, po, begin, end, alpha);
  });
  return out;
}

#if OPKILN_WITH_CUDA
at::Tensor weighted_sum_cuda(const at::Tensor& a, const at::Tensor& b, double alpha) {
  at::Tensor out = check_and_alloc(a, b, c10::DeviceType::CUDA);
  const c10::cuda::CUDAGuard guard(a.device());
  const at::Tensor ac = a.contiguous();
  const at::Tensor bc = b.contiguous();
  check_cuda_status(kernels::weighted_sum_cuda(float_kind(ac, kOp, "a"), ac.const_data_ptr(), bc.const_data_ptr(),
                                               out.mutable_data_ptr(), out.numel(), alpha, current_stream()),
                    kOp);
  return out;
}
#endif

}  // namespace weighted_sum_impl

TORCH_LIBRARY_IMPL(opkiln, CPU, m) { m.impl("weighted_sum", &weighted_sum_impl::weighted_sum_cpu); }

#if OPKILN_WITH_CUDA
TORCH_LIBRARY_IMPL(opkiln, CUDA, m) { m.impl("weighted_sum", &weighted_sum_impl::weighted_sum_cuda); }
#endif

}  // namespace opkiln::binding
