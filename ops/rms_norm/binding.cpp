// opkiln::rms_norm is CompositeImplicitAutograd: it calls the internal
// opkiln::_rms_norm_forward (fused kernel, also returns rstd) through the
// dispatcher, whose autograd formula (python/opkiln/ops.py) calls the fused
// opkiln::_rms_norm_backward. So autograd, opcheck and torch.compile see two
// real kernels with fake impls, and the public op needs no autograd or fake
// impl of its own. Both ABI modes (ops/facade/facade.h).
#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

#include "facade/facade.h"
#include "facade/row_reduce.h"
#include "rms_norm/rms_norm.h"

namespace opkiln::rms_norm_binding {
using namespace facade;

constexpr std::string_view kFwd = "_rms_norm_forward";
constexpr std::string_view kBwd = "_rms_norm_backward";

constexpr RowReduceNames kNames{kFwd, kBwd, "rstd"};

// The row-wise family's checks (facade/row_reduce.h); rms_norm has kernels of its own.
void check_eps(double eps) {
  OPKILN_CHECK_VALUE(std::isfinite(eps) && eps >= 0.0, "opkiln::rms_norm: eps must be a finite number >= 0, got ",
                     eps);
}

std::tuple<Tensor, Tensor> forward_cpu(const Tensor& x, const Tensor& weight, double eps) {
  const kernels::RowShape s = row_reduce_check(x, weight, DeviceType::CPU, kFwd);
  check_eps(eps);
  const Tensor xc = as_contiguous(x);
  const Tensor wc = as_contiguous(weight);
  Tensor y = empty_contiguous_like(xc);
  Tensor rstd = empty(row_reduce_rows(x).values, row_reduce_acc_type(x.scalar_type()), x);
  const ScalarKind kind = float_kind(x, kFwd, "x");
  const void* px = xc.const_data_ptr();
  const void* pw = wc.const_data_ptr();
  void* py = y.mutable_data_ptr();
  void* pr = rstd.mutable_data_ptr();
  const std::int64_t grain = std::max<std::int64_t>(1, 32768 / std::max<std::int64_t>(1, s.cols));
  parallel_for(0, s.rows, grain, [&](std::int64_t begin, std::int64_t end) {
    kernels::rms_norm_forward_cpu(kind, px, pw, py, pr, begin, end, s.cols, eps);
  });
  return {y, rstd};
}

std::tuple<Tensor, Tensor> backward_cpu(const Tensor& grad, const Tensor& x, const Tensor& weight,
                                        const Tensor& rstd) {
  const kernels::RowShape s = row_reduce_check_backward(grad, x, weight, rstd, DeviceType::CPU, kNames);
  const Tensor gc = as_contiguous(grad);
  const Tensor xc = as_contiguous(x);
  const Tensor wc = as_contiguous(weight);
  const Tensor rc = as_contiguous(rstd);
  Tensor dx = empty_contiguous_like(xc);
  Tensor dw = empty_contiguous_like(wc);
  const ScalarKind kind = float_kind(x, kBwd, "x");
  // One dw partial row per part, reduced in a fixed order: deterministic for a
  // given thread count.
  const std::int64_t parts = std::min<std::int64_t>(num_threads(), s.rows);
  Tensor partial = zeros({parts, s.cols}, row_reduce_acc_type(x.scalar_type()), x);
  const void* pg = gc.const_data_ptr();
  const void* px = xc.const_data_ptr();
  const void* pw = wc.const_data_ptr();
  const void* pr = rc.const_data_ptr();
  void* pdx = dx.mutable_data_ptr();
  void* pp = partial.mutable_data_ptr();
  const std::size_t acc_bytes = partial.element_size();
  parallel_for(0, parts, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t p = begin; p < end; ++p) {
      const std::int64_t r0 = s.rows * p / parts;
      const std::int64_t r1 = s.rows * (p + 1) / parts;
      kernels::rms_norm_backward_cpu(kind, pg, px, pw, pr, pdx, static_cast<char*>(pp) + p * s.cols * acc_bytes, r0,
                                     r1, s.cols);
    }
  });
  void* pdw = dw.mutable_data_ptr();
  parallel_for(0, s.cols, 4096, [&](std::int64_t begin, std::int64_t end) {
    kernels::rms_norm_reduce_dw_cpu(kind, pp, parts, pdw, begin, end, s.cols);
  });
  return {dx, dw};
}

#if OPKILN_WITH_CUDA
std::tuple<Tensor, Tensor> forward_cuda(const Tensor& x, const Tensor& weight, double eps) {
  const kernels::RowShape s = row_reduce_check(x, weight, DeviceType::CUDA, kFwd);
  check_eps(eps);
  const DeviceGuard guard(x);
  const Tensor xc = as_contiguous(x);
  const Tensor wc = as_contiguous(weight);
  Tensor y = empty_contiguous_like(xc);
  Tensor rstd = empty(row_reduce_rows(x).values, row_reduce_acc_type(x.scalar_type()), x);
  check_cuda(kernels::rms_norm_forward_cuda(float_kind(x, kFwd, "x"), xc.const_data_ptr(), wc.const_data_ptr(),
                                            y.mutable_data_ptr(), rstd.mutable_data_ptr(), s.rows, s.cols, eps,
                                            cuda_stream(x)),
             kFwd);
  return {y, rstd};
}

std::tuple<Tensor, Tensor> backward_cuda(const Tensor& grad, const Tensor& x, const Tensor& weight,
                                         const Tensor& rstd) {
  const kernels::RowShape s = row_reduce_check_backward(grad, x, weight, rstd, DeviceType::CUDA, kNames);
  const DeviceGuard guard(x);
  const Tensor gc = as_contiguous(grad);
  const Tensor xc = as_contiguous(x);
  const Tensor wc = as_contiguous(weight);
  const Tensor rc = as_contiguous(rstd);
  Tensor dx = empty_contiguous_like(xc);
  Tensor dw = empty_contiguous_like(wc);
  const std::int64_t parts = kernels::rms_norm_backward_cuda_parts(s.rows, s.cols);
  Tensor workspace = empty({parts, s.cols}, row_reduce_acc_type(x.scalar_type()), x);
  check_cuda(kernels::rms_norm_backward_cuda(float_kind(x, kBwd, "x"), gc.const_data_ptr(), xc.const_data_ptr(),
                                             wc.const_data_ptr(), rc.const_data_ptr(), dx.mutable_data_ptr(),
                                             dw.mutable_data_ptr(), workspace.mutable_data_ptr(), s.rows, s.cols,
                                             cuda_stream(x)),
             kBwd);
  return {dx, dw};
}
#endif

// Device-independent: dispatches to the backend kernels of _rms_norm_forward.
Tensor rms_norm_composite(const Tensor& x, const Tensor& weight, double eps) {
  static const Op forward("opkiln::_rms_norm_forward");
  return forward.call<2>(x, weight, eps)[0];
}

OPKILN_SCHEMAS(m) {
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor");
  m.def("_rms_norm_forward(Tensor x, Tensor weight, float eps) -> (Tensor, Tensor)");
  m.def("_rms_norm_backward(Tensor grad, Tensor x, Tensor weight, Tensor rstd) -> (Tensor, Tensor)");
}

OPKILN_KERNELS(CPU, m) {
  m.impl("_rms_norm_forward", OPKILN_KERNEL(forward_cpu));
  m.impl("_rms_norm_backward", OPKILN_KERNEL(backward_cpu));
}

#if OPKILN_WITH_CUDA
OPKILN_KERNELS(CUDA, m) {
  m.impl("_rms_norm_forward", OPKILN_KERNEL(forward_cuda));
  m.impl("_rms_norm_backward", OPKILN_KERNEL(backward_cuda));
}
#endif

OPKILN_KERNELS(CompositeImplicitAutograd, m) { m.impl("rms_norm", OPKILN_KERNEL(rms_norm_composite)); }

}  // namespace opkiln::rms_norm_binding
