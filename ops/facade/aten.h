// The facade over ATen and TORCH_LIBRARY (the per-torch build). Included by
// facade/facade.h only; op bindings never include it themselves.
#pragma once

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <array>
#include <cstddef>

#if OPKILN_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace opkiln::facade {

using Tensor = at::Tensor;
using ScalarType = at::ScalarType;
using DeviceType = c10::DeviceType;

// TORCH_CHECK and friends: c10::Error, c10::ValueError, c10::IndexError (RuntimeError,
// ValueError, IndexError in Python, as the stable facade's standard exceptions are).
[[noreturn]] inline void raise(Error kind, std::string message) {
  switch (kind) {
    case Error::Value: TORCH_CHECK_VALUE(false, message);
    case Error::Index: TORCH_CHECK_INDEX(false, message);
    case Error::Runtime: break;
  }
  TORCH_CHECK(false, message);
}

// "cpu", "cuda:0": torch's own spelling.
inline std::string device_name(const Tensor& t) { return c10::str(t.device()); }

inline Tensor as_contiguous(const Tensor& t) { return t.contiguous(); }

inline Tensor empty(const std::vector<std::int64_t>& sizes, ScalarType dtype, const Tensor& like) {
  return at::empty(sizes, like.options().dtype(dtype));
}
inline Tensor zeros(const std::vector<std::int64_t>& sizes, ScalarType dtype, const Tensor& like) {
  return at::zeros(sizes, like.options().dtype(dtype));
}
// A contiguous tensor of t's shape, dtype and device.
inline Tensor empty_contiguous_like(const Tensor& t) { return at::empty_like(t, at::MemoryFormat::Contiguous); }
// t[start:start + length] along dim, as a tensor of its own.
inline Tensor narrowed_copy(const Tensor& t, std::int64_t dim, std::int64_t start, std::int64_t length) {
  return t.narrow(dim, start, length).clone();
}

// Linear algebra through torch (deform_conv2d's products): a view of t in `sizes` (a copy where
// no view exists), a view with dims d0 and d1 swapped, and torch.matmul (batched, broadcast).
inline Tensor reshaped(const Tensor& t, const std::vector<std::int64_t>& sizes) { return t.reshape(sizes); }
inline Tensor transposed(const Tensor& t, std::int64_t d0, std::int64_t d1) { return t.transpose(d0, d1); }
inline Tensor matrix_product(const Tensor& a, const Tensor& b) { return at::matmul(a, b); }

// Element [row, col] of a 2-D tensor, as a double on the host (for error
// messages; synchronises with a CUDA tensor's stream).
inline double value_at(const Tensor& t, std::int64_t row, std::int64_t col) {
  return t.select(0, row).select(0, col).item<double>();
}

template <typename F>
void parallel_for(std::int64_t begin, std::int64_t end, std::int64_t grain, const F& f) {
  at::parallel_for(begin, end, grain, f);
}
inline std::int64_t num_threads() { return at::get_num_threads(); }

// Another operator, called through the dispatcher (so autograd and every other
// dispatch key see the call).
class Op {
 public:
  explicit Op(const char* qualified_name)
      : handle_(c10::Dispatcher::singleton().findSchemaOrThrow(qualified_name, "")) {}

  template <std::size_t Outputs, typename... Args>
  std::array<Tensor, Outputs> call(const Args&... args) const {
    torch::jit::Stack stack;
    stack.reserve(sizeof...(Args));
    (stack.emplace_back(args), ...);
    handle_.callBoxed(stack);
    std::array<Tensor, Outputs> out;
    for (std::size_t i = 0; i < Outputs; ++i) out[i] = std::move(stack[i]).toTensor();
    return out;
  }

 private:
  c10::OperatorHandle handle_;
};

#if OPKILN_WITH_CUDA
class DeviceGuard {
 public:
  explicit DeviceGuard(const Tensor& t) : guard_(t.device()) {}

 private:
  c10::cuda::CUDAGuard guard_;
};

inline CudaStream current_cuda_stream(int device) {
  return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
}
#endif

}  // namespace opkiln::facade

#define OPKILN_SCHEMAS(m) TORCH_LIBRARY_FRAGMENT(opkiln, m)
#define OPKILN_KERNELS(key, m) TORCH_LIBRARY_IMPL(opkiln, key, m)
#define OPKILN_KERNEL(fn) (&(fn))
