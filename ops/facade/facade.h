// The facade: everything an op binding (ops/<op>/binding.cpp) may use. One
// binding source compiles in both ABI modes because it sees only this header:
//   - the per-torch build (OPKILN_ABI_MODE=torch) implements it over ATen and
//     TORCH_LIBRARY (facade/aten.h, aten.cpp);
//   - the stable-ABI build (OPKILN_ABI_MODE=stable, OPKILN_STABLE_ABI=1) over
//     torch::stable and the stable C shim (facade/stable.h, stable.cpp).
//
// What a binding gets, in namespace opkiln::facade:
//   Tensor, ScalarType, DeviceType
//     Tensor methods both modes share (use no others): dim(), size(d) with
//     0 <= d < dim(), numel(), stride(d), is_contiguous(), element_size(),
//     scalar_type(), device(), const_data_ptr(), mutable_data_ptr(),
//     mutable_data_ptr<T>().
//   tensor access  sizes(t), device_name(t), float_kind(t, op, arg), as_contiguous(t)
//   allocation     empty(sizes, dtype, like), zeros(sizes, dtype, like) (on like's device),
//                  empty_contiguous_like(t), narrowed_copy(t, dim, start, length)
//                  (names chosen so that ADL never finds an ATen function of the same name)
//                  value_at(t, row, col): one element of a 2-D tensor as a host double
//                  Workspace(bytes, like): a kernel's scratch bytes on like's device (data()
//                  is nullptr for 0 bytes), alive as long as the object
//   RoI ops        facade/rois.h: the rois' checks and the batch-index error (common/roi.h)
//   checks         OPKILN_CHECK / _VALUE / _INDEX (cond, message pieces...): RuntimeError /
//                  ValueError / IndexError, the same type and message in both builds (the
//                  stable build throws std::runtime_error / std::invalid_argument /
//                  std::out_of_range, which torch reports as exactly these). There is no
//                  TypeError: no standard C++ exception reaches Python as one, so the stable
//                  ABI cannot raise it; wrong dtypes are RuntimeErrors, as in torch and
//                  torchvision. check_same_device, check_same_dtype, check_device: the
//                  shared messages.
//   CPU            parallel_for(begin, end, grain, f), num_threads()
//   CUDA           DeviceGuard(t), cuda_stream(t) (checks once that our kernels run on
//                  the GPU), check_cuda(status, op): only when OPKILN_WITH_CUDA
//   calls          Op("opkiln::name").call<outputs>(args...): another op through the dispatcher
//   registration   OPKILN_SCHEMAS(m) { m.def(<schema string>); }: the op's schema, written once
//                  OPKILN_KERNELS(CPU, m) { m.impl("name", OPKILN_KERNEL(fn)); }
//                  (CPU, CUDA, CompositeImplicitAutograd, ...); every op lives in the
//                  `opkiln` namespace (torch.ops.opkiln.*).
#pragma once

#include <cstdint>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/common.h"

#if OPKILN_WITH_CUDA
#include <cuda_runtime_api.h>

#include "common/arch_check.h"
#endif

namespace opkiln::facade {

using kernels::CudaStatus;
using kernels::CudaStream;
using kernels::ScalarKind;

// The Python exception an argument check raises, in both builds (see above).
enum class Error { Runtime, Value, Index };

// A tensor's sizes, printed as torch prints them: "[2, 3]".
struct Sizes {
  std::vector<std::int64_t> values;
  friend bool operator==(const Sizes&, const Sizes&) = default;
  friend std::ostream& operator<<(std::ostream& out, const Sizes& s) {
    out << '[';
    for (std::size_t i = 0; i < s.values.size(); ++i) out << (i > 0 ? ", " : "") << s.values[i];
    return out << ']';
  }
};

// Throws the error of `kind` with `message` as its whole text (backend-defined).
[[noreturn]] void raise(Error kind, std::string message);

template <typename... Args>
[[noreturn]] void fail(Error kind, const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  raise(kind, std::move(out).str());
}

}  // namespace opkiln::facade

#define OPKILN_CHECK_KIND_(kind, cond, ...)                               \
  do {                                                                    \
    if (!(cond)) [[unlikely]] {                                           \
      ::opkiln::facade::fail(::opkiln::facade::Error::kind, __VA_ARGS__); \
    }                                                                     \
  } while (false)
#define OPKILN_CHECK(cond, ...) OPKILN_CHECK_KIND_(Runtime, cond, __VA_ARGS__)
#define OPKILN_CHECK_VALUE(cond, ...) OPKILN_CHECK_KIND_(Value, cond, __VA_ARGS__)
#define OPKILN_CHECK_INDEX(cond, ...) OPKILN_CHECK_KIND_(Index, cond, __VA_ARGS__)

#if OPKILN_STABLE_ABI
#include "facade/stable.h"
#else
#include "facade/aten.h"
#endif

// What is written once for both backends, over the backend's primitives.
namespace opkiln::facade {

inline Sizes sizes(const Tensor& t) {
  Sizes s;
  s.values.reserve(static_cast<std::size_t>(t.dim()));
  for (std::int64_t d = 0; d < t.dim(); ++d) s.values.push_back(t.size(d));
  return s;
}

// The kernel cores' name for t's dtype; a RuntimeError for any non-float dtype.
inline ScalarKind float_kind(const Tensor& t, std::string_view op, std::string_view arg) {
  switch (t.scalar_type()) {
    case ScalarType::Float: return ScalarKind::Float32;
    case ScalarType::Double: return ScalarKind::Float64;
    case ScalarType::Half: return ScalarKind::Float16;
    case ScalarType::BFloat16: return ScalarKind::BFloat16;
    default: break;
  }
  fail(Error::Runtime, "opkiln::", op, ": ", arg, " must be float32, float64, float16 or bfloat16, got ",
       t.scalar_type());
}

inline void check_same_device(const Tensor& a, const Tensor& b, std::string_view op, std::string_view an,
                              std::string_view bn) {
  OPKILN_CHECK(a.device() == b.device(), "opkiln::", op, ": ", an, " is on ", device_name(a), " but ", bn, " is on ",
               device_name(b), "; move both to the same device");
}

inline void check_same_dtype(const Tensor& a, const Tensor& b, std::string_view op, std::string_view an,
                             std::string_view bn) {
  OPKILN_CHECK(a.scalar_type() == b.scalar_type(), "opkiln::", op, ": ", an, " is ", a.scalar_type(), " but ", bn,
               " is ", b.scalar_type(), "; cast one of them");
}

inline void check_device(const Tensor& t, DeviceType expected, std::string_view op, std::string_view arg) {
  OPKILN_CHECK(t.device().type() == expected, "opkiln::", op, ": ", arg, " must be a ",
               expected == DeviceType::CUDA ? "CUDA" : "CPU", " tensor for this kernel, got ", device_name(t));
}

// Scratch memory for a kernel (a CUDA workspace, a batch-index check's result), on like's device.
class Workspace {
 public:
  Workspace(std::size_t bytes, const Tensor& like)
      : bytes_(bytes), buffer_(empty({static_cast<std::int64_t>(bytes)}, ScalarType::Byte, like)) {}
  void* data() { return bytes_ > 0 ? buffer_.mutable_data_ptr() : nullptr; }
  std::size_t bytes() const { return bytes_; }

 private:
  std::size_t bytes_;
  Tensor buffer_;
};

#if OPKILN_WITH_CUDA
inline void check_cuda(CudaStatus status, std::string_view op) {
  OPKILN_CHECK(status == 0, "opkiln::", op, ": CUDA error: ", cudaGetErrorString(static_cast<cudaError_t>(status)));
}

// Once per device, before the first launch: a GPU that none of our SASS or PTX
// runs on gets an error naming its arch and ours, not "no kernel image is
// available for execution on the device".
inline void check_kernel_image(int device) {
  const CudaStatus status = kernels::cached_kernel_image_status(device);
  OPKILN_CHECK(!kernels::is_unsupported_gpu(status), kernels::unsupported_gpu_message(device));
  check_cuda(status, "kernel image check");
}

// The stream torch queues work for t's device on (torch.cuda.current_stream()).
inline CudaStream cuda_stream(const Tensor& t) {
  const int device = static_cast<int>(t.device().index());
  check_kernel_image(device);
  return current_cuda_stream(device);
}
#endif

}  // namespace opkiln::facade
