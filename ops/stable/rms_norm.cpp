// Stable-ABI binding of rms_norm, mirroring ops/torch/rms_norm.cpp:
// opkiln::rms_norm is CompositeImplicitAutograd and calls the internal
// opkiln::_rms_norm_forward through the dispatcher (torch_call_dispatcher), so
// autograd, fake impls and torch.compile see the same two fused kernels as in
// the per-torch build (python/opkiln/ops.py registers their fake/autograd).
#include "rms_norm/rms_norm.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <tuple>
#include <vector>

#include "binding.h"

namespace opkiln::stable_binding {
namespace {

constexpr const char* kFwd = "_rms_norm_forward";
constexpr const char* kBwd = "_rms_norm_backward";

ScalarType acc_type(ScalarType t) { return t == ScalarType::Double ? ScalarType::Double : ScalarType::Float; }

struct Shape {
  std::int64_t rows;
  std::int64_t cols;
  std::vector<std::int64_t> row_shape;  // x.shape[:-1], the shape of rstd
};

std::string sizes_str(const std::vector<std::int64_t>& sizes) {
  std::ostringstream out;
  out << '[';
  for (std::size_t i = 0; i < sizes.size(); ++i) out << (i > 0 ? ", " : "") << sizes[i];
  out << ']';
  return std::move(out).str();
}

Shape check_forward_args(const Tensor& x, const Tensor& weight, const char* op) {
  check_same_device(x, weight, op, "x", "weight");
  check_same_dtype(x, weight, op, "x", "weight");
  float_kind(x, op, "x");
  OPKILN_CHECK(x.dim() >= 1, "opkiln::", op,
                  ": x must have at least one dimension (normalized over the last), got a 0-d tensor");
  const std::int64_t cols = x.size(x.dim() - 1);
  OPKILN_CHECK(weight.dim() == 1 && weight.size(0) == cols, "opkiln::", op,
                  ": weight must be 1-D with x.shape[-1] = ", cols, " elements, got shape ", shape_str(weight));
  Shape s{1, cols, {}};
  for (std::int64_t d = 0; d + 1 < x.dim(); ++d) {
    s.rows *= x.size(d);
    s.row_shape.push_back(x.size(d));
  }
  return s;
}

void check_eps(double eps) {
  OPKILN_CHECK(std::isfinite(eps) && eps >= 0.0, "opkiln::rms_norm: eps must be a finite number >= 0, got ", eps);
}

Shape check_backward_args(const Tensor& grad, const Tensor& x, const Tensor& weight, const Tensor& rstd) {
  const Shape s = check_forward_args(x, weight, kBwd);
  check_same_device(grad, x, kBwd, "grad", "x");
  check_same_device(rstd, x, kBwd, "rstd", "x");
  check_same_dtype(grad, x, kBwd, "grad", "x");
  OPKILN_CHECK(same_shape(grad, x), "opkiln::", kBwd, ": grad must have the shape of x ", shape_str(x), ", got ",
                  shape_str(grad));
  bool rstd_shape_ok = rstd.dim() == static_cast<std::int64_t>(s.row_shape.size());
  for (std::int64_t d = 0; rstd_shape_ok && d < rstd.dim(); ++d) {
    rstd_shape_ok = rstd.size(d) == s.row_shape[static_cast<std::size_t>(d)];
  }
  OPKILN_CHECK(rstd_shape_ok, "opkiln::", kBwd, ": rstd must have shape x.shape[:-1] = ", sizes_str(s.row_shape),
                  ", got ", shape_str(rstd));
  OPKILN_CHECK(rstd.scalar_type() == acc_type(x.scalar_type()), "opkiln::", kBwd, ": rstd must be ",
                  acc_type(x.scalar_type()), " for ", x.scalar_type(), " x, got ", rstd.scalar_type());
  return s;
}

Tensor empty_acc(const std::vector<std::int64_t>& sizes, const Tensor& like) {
  return torch::stable::empty(sizes, acc_type(like.scalar_type()), std::nullopt, like.device());
}

std::tuple<Tensor, Tensor> forward_cpu(Tensor x, Tensor weight, double eps) {
  const Shape s = check_forward_args(x, weight, kFwd);
  check_device(x, DeviceType::CPU, kFwd, "x");
  check_eps(eps);
  const Tensor xc = torch::stable::contiguous(x);
  const Tensor wc = torch::stable::contiguous(weight);
  Tensor y = empty_contiguous_like(xc);
  Tensor rstd = empty_acc(s.row_shape, x);
  const auto kind = float_kind(x, kFwd, "x");
  const void* px = xc.const_data_ptr();
  const void* pw = wc.const_data_ptr();
  void* py = y.mutable_data_ptr();
  void* pr = rstd.mutable_data_ptr();
  const std::int64_t grain = std::max<std::int64_t>(1, 32768 / std::max<std::int64_t>(1, s.cols));
  torch::stable::parallel_for(0, s.rows, grain, [&](std::int64_t begin, std::int64_t end) {
    kernels::rms_norm_forward_cpu(kind, px, pw, py, pr, begin, end, s.cols, eps);
  });
  return {y, rstd};
}

std::tuple<Tensor, Tensor> backward_cpu(Tensor grad, Tensor x, Tensor weight, Tensor rstd) {
  const Shape s = check_backward_args(grad, x, weight, rstd);
  check_device(x, DeviceType::CPU, kBwd, "x");
  const Tensor gc = torch::stable::contiguous(grad);
  const Tensor xc = torch::stable::contiguous(x);
  const Tensor wc = torch::stable::contiguous(weight);
  const Tensor rc = torch::stable::contiguous(rstd);
  Tensor dx = empty_contiguous_like(xc);
  Tensor dw = empty_contiguous_like(wc);
  const auto kind = float_kind(x, kBwd, "x");
  // One dw partial row per part, reduced in a fixed order: deterministic for a
  // given thread count.
  const std::int64_t parts =
      std::min<std::int64_t>(static_cast<std::int64_t>(torch::stable::get_num_threads()), s.rows);
  Tensor partial = empty_acc({parts, s.cols}, x);
  torch::stable::zero_(partial);
  const void* pg = gc.const_data_ptr();
  const void* px = xc.const_data_ptr();
  const void* pw = wc.const_data_ptr();
  const void* pr = rc.const_data_ptr();
  void* pdx = dx.mutable_data_ptr();
  void* pp = partial.mutable_data_ptr();
  const std::size_t acc_bytes = partial.element_size();
  torch::stable::parallel_for(0, parts, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t p = begin; p < end; ++p) {
      const std::int64_t r0 = s.rows * p / parts;
      const std::int64_t r1 = s.rows * (p + 1) / parts;
      kernels::rms_norm_backward_cpu(kind, pg, px, pw, pr, pdx, static_cast<char*>(pp) + p * s.cols * acc_bytes, r0,
                                     r1, s.cols);
    }
  });
  void* pdw = dw.mutable_data_ptr();
  torch::stable::parallel_for(0, s.cols, 4096, [&](std::int64_t begin, std::int64_t end) {
    kernels::rms_norm_reduce_dw_cpu(kind, pp, parts, pdw, begin, end, s.cols);
  });
  return {dx, dw};
}

#if OPKILN_WITH_CUDA
std::tuple<Tensor, Tensor> forward_cuda(Tensor x, Tensor weight, double eps) {
  const Shape s = check_forward_args(x, weight, kFwd);
  check_device(x, DeviceType::CUDA, kFwd, "x");
  check_eps(eps);
  const torch::stable::accelerator::DeviceGuard guard(x.get_device_index());
  const Tensor xc = torch::stable::contiguous(x);
  const Tensor wc = torch::stable::contiguous(weight);
  Tensor y = empty_contiguous_like(xc);
  Tensor rstd = empty_acc(s.row_shape, x);
  check_cuda_status(kernels::rms_norm_forward_cuda(float_kind(x, kFwd, "x"), xc.const_data_ptr(), wc.const_data_ptr(),
                                                   y.mutable_data_ptr(), rstd.mutable_data_ptr(), s.rows, s.cols, eps,
                                                   current_cuda_stream(x.get_device_index())),
                    kFwd);
  return {y, rstd};
}

std::tuple<Tensor, Tensor> backward_cuda(Tensor grad, Tensor x, Tensor weight, Tensor rstd) {
  const Shape s = check_backward_args(grad, x, weight, rstd);
  check_device(x, DeviceType::CUDA, kBwd, "x");
  const torch::stable::accelerator::DeviceGuard guard(x.get_device_index());
  const Tensor gc = torch::stable::contiguous(grad);
  const Tensor xc = torch::stable::contiguous(x);
  const Tensor wc = torch::stable::contiguous(weight);
  const Tensor rc = torch::stable::contiguous(rstd);
  Tensor dx = empty_contiguous_like(xc);
  Tensor dw = empty_contiguous_like(wc);
  const std::int64_t parts = kernels::rms_norm_backward_cuda_parts(s.rows, s.cols);
  Tensor workspace = empty_acc({parts, s.cols}, x);
  check_cuda_status(kernels::rms_norm_backward_cuda(float_kind(x, kBwd, "x"), gc.const_data_ptr(), xc.const_data_ptr(),
                                                    wc.const_data_ptr(), rc.const_data_ptr(), dx.mutable_data_ptr(),
                                                    dw.mutable_data_ptr(), workspace.mutable_data_ptr(), s.rows,
                                                    s.cols, current_cuda_stream(x.get_device_index())),
                    kBwd);
  return {dx, dw};
}
#endif

// Device-independent: dispatches to the backend kernels of _rms_norm_forward.
Tensor rms_norm_composite(Tensor x, Tensor weight, double eps) {
  std::array<StableIValue, 3> stack{torch::stable::detail::from(x), torch::stable::detail::from(weight),
                                    torch::stable::detail::from(eps)};
  call_op("opkiln::_rms_norm_forward", stack);
  // (y, rstd): both owned here; rstd is released on return.
  Tensor y = torch::stable::detail::to<Tensor>(stack[0]);
  [[maybe_unused]] const Tensor rstd = torch::stable::detail::to<Tensor>(stack[1]);
  return y;
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(opkiln, CPU, m) {
  m.impl("_rms_norm_forward", TORCH_BOX(&forward_cpu));
  m.impl("_rms_norm_backward", TORCH_BOX(&backward_cpu));
}

#if OPKILN_WITH_CUDA
STABLE_TORCH_LIBRARY_IMPL(opkiln, CUDA, m) {
  m.impl("_rms_norm_forward", TORCH_BOX(&forward_cuda));
  m.impl("_rms_norm_backward", TORCH_BOX(&backward_cuda));
}
#endif

STABLE_TORCH_LIBRARY_IMPL(opkiln, CompositeImplicitAutograd, m) {
  m.impl("rms_norm", TORCH_BOX(&rms_norm_composite));
}

}  // namespace opkiln::stable_binding
