// The facade over the LibTorch stable ABI (OPKILN_ABI_MODE=stable): written
// against torch::stable::Tensor and the header-only parts of torch, so the
// library imports nothing from libtorch but its stable C shim. Included by
// facade/facade.h only; op bindings never include it themselves.
#pragma once

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/DeviceType.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/Exception.h>

#include <array>
#include <cstddef>
#include <optional>
#include <stdexcept>

#if OPKILN_WITH_CUDA
#include <torch/csrc/stable/accelerator.h>
#endif

namespace opkiln::facade {

using Tensor = torch::stable::Tensor;
using ScalarType = torch::headeronly::ScalarType;
using DeviceType = torch::headeronly::DeviceType;

// The last error an opkiln kernel raised on this thread (its kind and message). An
// op that calls another through the dispatcher (Op::call) gets only an error code
// back; on torch < 2.13 the message is otherwise lost, and on every torch its type.
struct KernelError {
  Error kind = Error::Runtime;
  std::string message;
};
KernelError& last_kernel_error();

// torch's message for the last failed shim call on this thread, or nullptr
// (torch < 2.13 only logs it).
const char* last_torch_error();

// The message alone, without STD_TORCH_CHECK's "function, file:line, " prefix, as
// the standard exception that torch's Python bindings report as the per-torch
// build's error type: std::invalid_argument -> ValueError, std::out_of_range ->
// IndexError, std::runtime_error -> RuntimeError (torch/pybind11 translate these).
[[noreturn]] inline void raise(Error kind, std::string message) {
  KernelError& last = last_kernel_error();
  last.kind = kind;
  last.message = message;
  switch (kind) {
    case Error::Value: throw std::invalid_argument(std::move(message));
    case Error::Index: throw std::out_of_range(std::move(message));
    case Error::Runtime: break;
  }
  throw std::runtime_error(std::move(message));
}

// "cpu", "cuda:0": the spelling torch uses in its own messages.
inline std::string device_name(const Tensor& t) {
  const torch::stable::Device d = t.device();
  std::ostringstream out;
  switch (d.type()) {
    case DeviceType::CPU: out << "cpu"; break;
    case DeviceType::CUDA: out << "cuda"; break;
    case DeviceType::Meta: out << "meta"; break;
    default: out << "device_type_" << static_cast<int>(d.type()); break;
  }
  if (d.has_index()) out << ':' << static_cast<int>(d.index());
  return std::move(out).str();
}

inline Tensor as_contiguous(const Tensor& t) { return torch::stable::contiguous(t); }

inline Tensor empty(const std::vector<std::int64_t>& sizes, ScalarType dtype, const Tensor& like) {
  return torch::stable::empty(sizes, dtype, std::nullopt, like.device());
}
inline Tensor zeros(const std::vector<std::int64_t>& sizes, ScalarType dtype, const Tensor& like) {
  Tensor t = empty(sizes, dtype, like);
  torch::stable::zero_(t);
  return t;
}
// A contiguous tensor of t's shape, dtype and device.
inline Tensor empty_contiguous_like(const Tensor& t) {
  return torch::stable::empty(t.sizes(), t.scalar_type(), std::nullopt, t.device(), std::nullopt,
                              torch::headeronly::MemoryFormat::Contiguous);
}
// t[start:start + length] along dim, as a tensor of its own.
// Linear algebra through torch (see facade/aten.h).
inline Tensor reshaped(const Tensor& t, const std::vector<std::int64_t>& sizes) {
  return torch::stable::reshape(t, sizes);
}
inline Tensor transposed(const Tensor& t, std::int64_t d0, std::int64_t d1) {
  return torch::stable::transpose(t, d0, d1);
}
inline Tensor matrix_product(const Tensor& a, const Tensor& b) { return torch::stable::matmul(a, b); }
inline Tensor narrowed_copy(const Tensor& t, std::int64_t dim, std::int64_t start, std::int64_t length) {
  Tensor self = t;  // torch::stable::narrow takes a Tensor& (a new reference to the same tensor)
  return torch::stable::clone(torch::stable::narrow(self, dim, start, length));
}

// Element [row, col] of a 2-D tensor, as a double on the host (for error
// messages; synchronises with a CUDA tensor's stream).
inline double value_at(const Tensor& t, std::int64_t row, std::int64_t col) {
  Tensor self = t;
  Tensor line = torch::stable::narrow(self, 0, row, 1);
  const Tensor cell = torch::stable::narrow(line, 1, col, 1);
  const Tensor host = torch::stable::to(cell, ScalarType::Double, std::nullopt, torch::stable::Device(DeviceType::CPU),
                                        std::nullopt, false, true);
  return host.const_data_ptr<double>()[0];
}

template <typename F>
void parallel_for(std::int64_t begin, std::int64_t end, std::int64_t grain, const F& f) {
  torch::stable::parallel_for(begin, end, grain, f);
}
inline std::int64_t num_threads() { return static_cast<std::int64_t>(torch::stable::get_num_threads()); }

inline void check_shim(AOTITorchError err, const char* call) {
  if (err == AOTI_TORCH_SUCCESS) return;
  const char* what = last_torch_error();
  throw std::runtime_error(what != nullptr ? std::string(what)
                                           : std::string(call) + " failed; torch logged the reason above");
}

// Another operator, called through the dispatcher (torch_call_dispatcher). An
// error raised by one of our kernels inside it comes back with its own
// message, on any torch.
class Op {
 public:
  explicit Op(const char* qualified_name) : name_(qualified_name) {}

  template <std::size_t Outputs, typename... Args>
  std::array<Tensor, Outputs> call(const Args&... args) const {
    constexpr std::size_t n = sizeof...(Args) > Outputs ? sizeof...(Args) : Outputs;
    std::array<StableIValue, n> stack{torch::stable::detail::from(args)...};
    KernelError& kernel_error = last_kernel_error();
    kernel_error.message.clear();
    const AOTITorchError err = torch_call_dispatcher(name_, "", stack.data(), TORCH_ABI_VERSION);
    if (err != AOTI_TORCH_SUCCESS && !kernel_error.message.empty()) {
      // Raised again with its own type, so that an outer Op::call sees it too.
      raise(kernel_error.kind, std::string(kernel_error.message));
    }
    check_shim(err, name_);
    // The results are new references, owned by the tensors made from them.
    std::array<Tensor, Outputs> out;
    for (std::size_t i = 0; i < Outputs; ++i) out[i] = torch::stable::detail::to<Tensor>(stack[i]);
    return out;
  }

 private:
  const char* name_;
};

#if OPKILN_WITH_CUDA
class DeviceGuard {
 public:
  explicit DeviceGuard(const Tensor& t) : guard_(t.get_device_index()) {}

 private:
  torch::stable::accelerator::DeviceGuard guard_;
};

// Looked up at run time in the libtorch_cuda torch has loaded (facade/stable.cpp).
CudaStream current_cuda_stream(int device);
#endif

}  // namespace opkiln::facade

#define OPKILN_SCHEMAS(m) STABLE_TORCH_LIBRARY_FRAGMENT(opkiln, m)
#define OPKILN_KERNELS(key, m) STABLE_TORCH_LIBRARY_IMPL(opkiln, key, m)
#define OPKILN_KERNEL(fn) TORCH_BOX(&(fn))
