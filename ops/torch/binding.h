// Thin helpers shared by the TORCH_LIBRARY bindings: argument checks with
// clear messages, and the map from torch dtypes to the kernel cores' enum.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <string_view>

#include "common/common.h"

#if OPKILN_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include "common/arch_check.h"
#endif

namespace opkiln::binding {

inline kernels::ScalarKind float_kind(const at::Tensor& t, std::string_view op, std::string_view arg) {
  switch (t.scalar_type()) {
    case at::kFloat: return kernels::ScalarKind::Float32;
    case at::kDouble: return kernels::ScalarKind::Float64;
    case at::kHalf: return kernels::ScalarKind::Float16;
    case at::kBFloat16: return kernels::ScalarKind::BFloat16;
    default:
      TORCH_CHECK_TYPE(false, "opkiln::", op, ": ", arg, " must be float32, float64, float16 or bfloat16, got ",
                       t.scalar_type());
  }
}

inline void check_same_device(const at::Tensor& a, const at::Tensor& b, std::string_view op, std::string_view an,
                              std::string_view bn) {
  TORCH_CHECK(a.device() == b.device(), "opkiln::", op, ": ", an, " is on ", a.device(), " but ", bn, " is on ",
              b.device(), "; move both to the same device");
}

inline void check_same_dtype(const at::Tensor& a, const at::Tensor& b, std::string_view op, std::string_view an,
                             std::string_view bn) {
  TORCH_CHECK_TYPE(a.scalar_type() == b.scalar_type(), "opkiln::", op, ": ", an, " is ", a.scalar_type(), " but ",
                   bn, " is ", b.scalar_type(), "; cast one of them");
}

inline void check_device(const at::Tensor& t, c10::DeviceType expected, std::string_view op, std::string_view arg) {
  TORCH_CHECK(t.device().type() == expected, "opkiln::", op, ": ", arg, " must be a ", c10::DeviceTypeName(expected),
              " tensor for this kernel, got ", t.device());
}

#if OPKILN_WITH_CUDA
inline void check_cuda_status(kernels::CudaStatus status, std::string_view op) {
  TORCH_CHECK(status == 0, "opkiln::", op, ": CUDA error: ", cudaGetErrorString(static_cast<cudaError_t>(status)));
}

// Once per device, before the first launch: a GPU that none of our SASS or PTX
// runs on gets an error naming its arch and ours, not "no kernel image is
// available for execution on the device".
inline void check_kernel_image(c10::DeviceIndex device) {
  const kernels::CudaStatus status = kernels::cached_kernel_image_status(device);
  TORCH_CHECK(!kernels::is_unsupported_gpu(status), kernels::unsupported_gpu_message(device));
  check_cuda_status(status, "kernel image check");
}

inline kernels::CudaStream current_stream() {
  check_kernel_image(c10::cuda::current_device());
  return c10::cuda::getCurrentCUDAStream().stream();
}
#endif

}  // namespace opkiln::binding
