// opkiln::weighted_sum: schema, argument checks and kernel registrations, for
// both ABI modes (ops/facade/facade.h). Autograd and the fake impl: python/opkiln/ops.py.
#include "facade/facade.h"
#include "weighted_sum/weighted_sum.h"

namespace opkiln::weighted_sum_binding {
using namespace facade;

constexpr std::string_view kOp = "weighted_sum";

Tensor check_and_alloc(const Tensor& a, const Tensor& b, DeviceType device) {
  check_same_device(a, b, kOp, "a", "b");
  check_device(a, device, kOp, "a");
  check_same_dtype(a, b, kOp, "a", "b");
  float_kind(a, kOp, "a");
  OPKILN_CHECK(sizes(a) == sizes(b), "opkiln::weighted_sum: a and b must have the same shape, got ", sizes(a),
               " and ", sizes(b));
  return empty_contiguous_like(a);
}

Tensor weighted_sum_cpu(const Tensor& a, const Tensor& b, double alpha) {
  Tensor out = check_and_alloc(a, b, DeviceType::CPU);
  const Tensor ac = as_contiguous(a);
  const Tensor bc = as_contiguous(b);
  const ScalarKind kind = float_kind(ac, kOp, "a");
  const void* pa = ac.const_data_ptr();
  const void* pb = bc.const_data_ptr();
  void* po = out.mutable_data_ptr();
  parallel_for(0, out.numel(), 32768, [&](std::int64_t begin, std::int64_t end) {
    kernels::weighted_sum_cpu(kind, pa, pb, po, begin, end, alpha);
  });
  return out;
}

#if OPKILN_WITH_CUDA
Tensor weighted_sum_cuda(const Tensor& a, const Tensor& b, double alpha) {
  Tensor out = check_and_alloc(a, b, DeviceType::CUDA);
  const DeviceGuard guard(a);
  const Tensor ac = as_contiguous(a);
  const Tensor bc = as_contiguous(b);
  check_cuda(kernels::weighted_sum_cuda(float_kind(ac, kOp, "a"), ac.const_data_ptr(), bc.const_data_ptr(),
                                        out.mutable_data_ptr(), out.numel(), alpha, cuda_stream(a)),
             kOp);
  return out;
}
#endif

OPKILN_SCHEMAS(m) { m.def("weighted_sum(Tensor a, Tensor b, float alpha) -> Tensor"); }

OPKILN_KERNELS(CPU, m) { m.impl("weighted_sum", OPKILN_KERNEL(weighted_sum_cpu)); }

#if OPKILN_WITH_CUDA
OPKILN_KERNELS(CUDA, m) { m.impl("weighted_sum", OPKILN_KERNEL(weighted_sum_cuda)); }
#endif

}  // namespace opkiln::weighted_sum_binding
