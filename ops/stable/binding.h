// Thin helpers shared by the stable-ABI bindings (OPKILN_ABI_MODE=stable): the
// same argument checks and messages as ops/torch/binding.h, written against
// torch::stable::Tensor and the header-only parts of torch, so the library
// imports nothing from libtorch but its stable C shim.
#pragma once

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/DeviceType.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/Exception.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <sstream>
#include <string>
#include <utility>

#include "common/common.h"

#if OPKILN_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace opkiln::stable_binding {

// The message of the last error an opkiln kernel raised on this thread. An op
// that calls another through the dispatcher (rms_norm -> _rms_norm_forward)
// gets only an error code back; on torch < 2.13 the message is otherwise lost.
std::string& last_kernel_error();

// Throws std::runtime_error with the pieces streamed together: the same
// message as TORCH_CHECK in ops/torch, without STD_TORCH_CHECK's
// "function, file:line, " prefix. (The stable ABI has no error types: torch
// reports every error of a stable kernel as RuntimeError.)
template <typename... Args>
[[noreturn]] void fail(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  std::string message = std::move(out).str();
  last_kernel_error() = message;
  throw std::runtime_error(std::move(message));
}

#define OPKILN_CHECK(cond, ...)                         \
  do {                                                  \
    if (!(cond)) [[unlikely]] {                         \
      ::opkiln::stable_binding::fail(__VA_ARGS__);      \
    }                                                   \
  } while (false)

using torch::headeronly::DeviceType;
using torch::headeronly::ScalarType;
using torch::stable::Device;
using torch::stable::Tensor;

// "cpu", "cuda:0": the spelling torch uses in its own messages.
inline std::string device_name(const Device& d) {
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

// "[2, 3]", as torch prints sizes.
inline std::string shape_str(const Tensor& t) {
  std::ostringstream out;
  out << '[';
  for (std::int64_t i = 0; i < t.dim(); ++i) {
    if (i > 0) out << ", ";
    out << t.size(i);
  }
  out << ']';
  return std::move(out).str();
}

inline bool same_shape(const Tensor& a, const Tensor& b) {
  if (a.dim() != b.dim()) return false;
  for (std::int64_t i = 0; i < a.dim(); ++i) {
    if (a.size(i) != b.size(i)) return false;
  }
  return true;
}

inline kernels::ScalarKind float_kind(const Tensor& t, const char* op, const char* arg) {
  switch (t.scalar_type()) {
    case ScalarType::Float: return kernels::ScalarKind::Float32;
    case ScalarType::Double: return kernels::ScalarKind::Float64;
    case ScalarType::Half: return kernels::ScalarKind::Float16;
    case ScalarType::BFloat16: return kernels::ScalarKind::BFloat16;
    default: break;
  }
  fail("opkiln::", op, ": ", arg, " must be float32, float64, float16 or bfloat16, got ", t.scalar_type());
}

inline void check_same_device(const Tensor& a, const Tensor& b, const char* op, const char* an, const char* bn) {
  OPKILN_CHECK(a.device() == b.device(), "opkiln::", op, ": ", an, " is on ", device_name(a.device()), " but ",
                  bn, " is on ", device_name(b.device()), "; move both to the same device");
}

inline void check_same_dtype(const Tensor& a, const Tensor& b, const char* op, const char* an, const char* bn) {
  OPKILN_CHECK(a.scalar_type() == b.scalar_type(), "opkiln::", op, ": ", an, " is ", a.scalar_type(), " but ",
                  bn, " is ", b.scalar_type(), "; cast one of them");
}

inline void check_device(const Tensor& t, DeviceType expected, const char* op, const char* arg) {
  OPKILN_CHECK(t.device().type() == expected, "opkiln::", op, ": ", arg, " must be a ",
                  expected == DeviceType::CUDA ? "CUDA" : "CPU", " tensor for this kernel, got ",
                  device_name(t.device()));
}

// torch's message for the last failed shim call on this thread, or nullptr
// (torch < 2.13 only logs it).
const char* last_torch_error();

inline void check_shim(AOTITorchError err, const char* call) {
  if (err == AOTI_TORCH_SUCCESS) return;
  const char* what = last_torch_error();
  throw std::runtime_error(what != nullptr ? std::string(what)
                                           : std::string(call) + " failed; torch logged the reason above");
}

// Calls the op `name` (overload "") through the dispatcher; the stack holds
// its arguments and receives its results (new references). An error raised by
// one of our kernels inside it comes back with its own message, on any torch.
template <std::size_t N>
void call_op(const char* name, std::array<StableIValue, N>& stack) {
  std::string& kernel_error = last_kernel_error();
  kernel_error.clear();
  const AOTITorchError err = torch_call_dispatcher(name, "", stack.data(), TORCH_ABI_VERSION);
  if (err != AOTI_TORCH_SUCCESS && !kernel_error.empty()) {
    // Rethrown through fail() so that an outer call_op sees it too.
    fail(std::string(kernel_error));
  }
  check_shim(err, name);
}

// A contiguous tensor of `like`'s shape, dtype and device.
inline Tensor empty_contiguous_like(const Tensor& like) {
  return torch::stable::empty(like.sizes(), like.scalar_type(), std::nullopt, like.device(), std::nullopt,
                              torch::headeronly::MemoryFormat::Contiguous);
}

#if OPKILN_WITH_CUDA
inline void check_cuda_status(kernels::CudaStatus status, const char* op) {
  OPKILN_CHECK(status == 0, "opkiln::", op, ": CUDA error: ",
                  cudaGetErrorString(static_cast<cudaError_t>(status)));
}

// The stream torch's CUDA work on `device` is queued on (torch.cuda.current_stream()).
kernels::CudaStream current_cuda_stream(std::int32_t device);
#endif

}  // namespace opkiln::stable_binding
