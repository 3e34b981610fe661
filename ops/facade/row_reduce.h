// The binding of a row-wise reduction op (common/row_reduce.h), written once: the checks, the
// contiguous inputs, the outputs' allocation, the workspace and the CPU/CUDA dispatch. A member op's
// binding.cpp calls row_reduce_forward / row_reduce_backward with its per-row math `Op` from
// functions of its schema's signature (kiln_tool.new_op.rowwise_schemas) and registers them. Include
// it after facade/facade.h.
//
// Inputs: x [..., cols] (reduced over the last dimension, x.shape[:-1] flattened into rows), weight
// [cols], same device (the kernel's) and float dtype. Outputs: y of x's shape and dtype, stat of
// shape x.shape[:-1] in the accumulation type (float64 for float64, else float32); the backward
// gives dx and dweight. The CPU backward sums dweight from one partial row per part in part order:
// deterministic for a given thread count.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <tuple>

#include "common/row_reduce.h"
#include "facade/facade.h"

namespace opkiln::facade {

// The names the messages use: the forward op, its backward, and the per-row statistic the forward
// saves for the backward.
struct RowReduceNames {
  std::string_view forward, backward, stat = "stat";
};

inline ScalarType row_reduce_acc_type(ScalarType t) {
  return t == ScalarType::Double ? ScalarType::Double : ScalarType::Float;
}

// x [..., cols] as rows x cols, weight [cols], same device (the kernel's) and float dtype.
inline kernels::RowShape row_reduce_check(const Tensor& x, const Tensor& weight, DeviceType device,
                                          std::string_view op) {
  check_device(x, device, op, "x");
  check_same_device(x, weight, op, "x", "weight");
  check_same_dtype(x, weight, op, "x", "weight");
  float_kind(x, op, "x");
  OPKILN_CHECK(x.dim() >= 1, "opkiln::", op, ": x must have at least one dimension (reduced over the last), got a "
               "0-d tensor");
  kernels::RowShape s{1, x.size(x.dim() - 1)};
  OPKILN_CHECK(weight.dim() == 1 && weight.size(0) == s.cols, "opkiln::", op, ": weight must be 1-D with x.shape[-1] = ",
               s.cols, " elements, got shape ", sizes(weight));
  for (std::int64_t d = 0; d + 1 < x.dim(); ++d) s.rows *= x.size(d);
  return s;
}

inline Sizes row_reduce_rows(const Tensor& x) {
  Sizes out;
  for (std::int64_t d = 0; d + 1 < x.dim(); ++d) out.values.push_back(x.size(d));
  return out;
}

// The backward's inputs: x and weight as the forward's, grad of x's shape, device and dtype, and the
// forward's per-row statistic of shape x.shape[:-1] in the accumulation type.
inline kernels::RowShape row_reduce_check_backward(const Tensor& grad, const Tensor& x, const Tensor& weight,
                                                   const Tensor& stat, DeviceType device, RowReduceNames names) {
  const std::string_view op = names.backward;
  const kernels::RowShape s = row_reduce_check(x, weight, device, op);
  check_same_device(grad, x, op, "grad", "x");
  check_same_device(stat, x, op, names.stat, "x");
  check_same_dtype(grad, x, op, "grad", "x");
  OPKILN_CHECK(sizes(grad) == sizes(x), "opkiln::", op, ": grad must have the shape of x ", sizes(x), ", got ",
               sizes(grad));
  OPKILN_CHECK(sizes(stat) == row_reduce_rows(x), "opkiln::", op, ": ", names.stat,
               " must have shape x.shape[:-1] = ", row_reduce_rows(x), ", got ", sizes(stat));
  const ScalarType acc = row_reduce_acc_type(x.scalar_type());
  OPKILN_CHECK(stat.scalar_type() == acc, "opkiln::", op, ": ", names.stat, " must be ", acc, " for ",
               x.scalar_type(), " x, got ", stat.scalar_type());
  return s;
}

// (y, stat).
template <typename Op>
std::tuple<Tensor, Tensor> row_reduce_forward(const Tensor& x, const Tensor& weight, double eps, DeviceType device,
                                              RowReduceNames names) {
  const std::string_view op = names.forward;
  const kernels::RowShape s = row_reduce_check(x, weight, device, op);
  OPKILN_CHECK_VALUE(std::isfinite(eps) && eps >= 0.0, "opkiln::", op, ": eps must be a finite number >= 0, got ", eps);
#if OPKILN_WITH_CUDA
  std::optional<DeviceGuard> guard;
  if (device == DeviceType::CUDA) guard.emplace(x);
#endif
  const Tensor xc = as_contiguous(x);
  const Tensor wc = as_contiguous(weight);
  Tensor y = empty_contiguous_like(xc);
  Tensor stat = empty(row_reduce_rows(x).values, row_reduce_acc_type(x.scalar_type()), x);
  const kernels::ScalarKind kind = float_kind(x, op, "x");
#if OPKILN_WITH_CUDA
  if (device == DeviceType::CUDA) {
    check_cuda(kernels::row_reduce_forward_cuda<Op>(kind, s, xc.const_data_ptr(), wc.const_data_ptr(),
                                                    y.mutable_data_ptr(), stat.mutable_data_ptr(), eps, cuda_stream(x)),
               op);
    return {y, stat};
  }
#endif
  const void* px = xc.const_data_ptr();
  const void* pw = wc.const_data_ptr();
  void* py = y.mutable_data_ptr();
  void* ps = stat.mutable_data_ptr();
  parallel_for(0, s.rows, std::max<std::int64_t>(1, 32768 / std::max<std::int64_t>(1, s.cols)),
               [&](std::int64_t begin, std::int64_t end) {
                 kernels::row_reduce_forward_cpu<Op>(kind, s, px, pw, py, ps, eps, begin, end);
               });
  return {y, stat};
}

// (dx, dweight) from grad (dL/dy), x, weight and the forward's stat.
template <typename Op>
std::tuple<Tensor, Tensor> row_reduce_backward(const Tensor& grad, const Tensor& x, const Tensor& weight,
                                               const Tensor& stat, DeviceType device, RowReduceNames names) {
  const std::string_view op = names.backward;
  const kernels::RowShape s = row_reduce_check_backward(grad, x, weight, stat, device, names);
  const ScalarType acc = row_reduce_acc_type(x.scalar_type());
#if OPKILN_WITH_CUDA
  std::optional<DeviceGuard> guard;
  if (device == DeviceType::CUDA) guard.emplace(x);
#endif
  const Tensor gc = as_contiguous(grad);
  const Tensor xc = as_contiguous(x);
  const Tensor wc = as_contiguous(weight);
  const Tensor sc = as_contiguous(stat);
  Tensor dx = empty_contiguous_like(xc);
  Tensor dw = empty_contiguous_like(wc);
  const kernels::ScalarKind kind = float_kind(x, op, "x");
#if OPKILN_WITH_CUDA
  if (device == DeviceType::CUDA) {
    Workspace ws(static_cast<std::size_t>(kernels::row_reduce_cuda_parts(s.rows) * s.cols) * stat.element_size(), x);
    check_cuda(kernels::row_reduce_backward_cuda<Op>(kind, s, gc.const_data_ptr(), xc.const_data_ptr(),
                                                     wc.const_data_ptr(), sc.const_data_ptr(), dx.mutable_data_ptr(),
                                                     dw.mutable_data_ptr(), ws.data(), cuda_stream(x)),
               op);
    return {dx, dw};
  }
#endif
  // One dw partial row per part, summed in part order: deterministic for a given thread count.
  const std::int64_t parts = std::min<std::int64_t>(num_threads(), s.rows);
  Tensor partial = zeros({parts, s.cols}, acc, x);
  const void* pg = gc.const_data_ptr();
  const void* px = xc.const_data_ptr();
  const void* pw = wc.const_data_ptr();
  const void* ps = sc.const_data_ptr();
  void* pdx = dx.mutable_data_ptr();
  char* pp = static_cast<char*>(partial.mutable_data_ptr());
  const std::size_t acc_bytes = partial.element_size();
  parallel_for(0, parts, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t p = begin; p < end; ++p) {
      kernels::row_reduce_backward_cpu<Op>(kind, s, pg, px, pw, ps, pdx, pp + p * s.cols * acc_bytes,
                                           s.rows * p / parts, s.rows * (p + 1) / parts);
    }
  });
  void* pdw = dw.mutable_data_ptr();
  parallel_for(0, s.cols, 4096, [&](std::int64_t begin, std::int64_t end) {
    kernels::row_reduce_sum_parts_cpu<Op>(kind, pp, parts, s.cols, pdw, begin, end);
  });
  return {dx, dw};
}

}  // namespace opkiln::facade
