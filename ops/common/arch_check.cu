// The probe kernel is compiled with the same architecture list as every other
// kernel in this library, so asking the runtime for its attributes answers
// whether any of our images (SASS, or PTX it can JIT) runs on the current GPU.
#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <string>

#include "arch_check.h"

#ifndef OPKILN_CUDA_ARCH_LIST
#define OPKILN_CUDA_ARCH_LIST "unknown"
#endif

namespace opkiln::kernels {
// A named namespace, not an anonymous one: nvcc hashes the absolute source path into
// anonymous-namespace names, which would make the fatbin differ between checkouts.
namespace arch_check_cu {

__global__ void arch_probe_kernel() {}

}  // namespace arch_check_cu
using namespace arch_check_cu;
CudaStatus kernel_image_status() {
  cudaFuncAttributes attributes{};
  const cudaError_t status = cudaFuncGetAttributes(&attributes, arch_probe_kernel);
  if (status != cudaSuccess) {
    // Not a sticky error: clear it, so the next launch reports its own status.
    static_cast<void>(cudaGetLastError());
  }
  return static_cast<CudaStatus>(status);
}

int device_compute_capability(int device) {
  int major = 0;
  int minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    return -1;
  }
  return major * 10 + minor;
}

const char* compiled_cuda_archs() { return OPKILN_CUDA_ARCH_LIST; }

CudaStatus cached_kernel_image_status(int device) {
  static std::array<std::atomic<bool>, 64> verified{};
  const auto slot = static_cast<std::size_t>(device);
  if (slot < verified.size() && verified[slot].load(std::memory_order_acquire)) return 0;
  const CudaStatus status = kernel_image_status();
  if (status == 0 && slot < verified.size()) verified[slot].store(true, std::memory_order_release);
  return status;
}

bool is_unsupported_gpu(CudaStatus status) {
  return status == static_cast<CudaStatus>(cudaErrorNoKernelImageForDevice);
}

std::string unsupported_gpu_message(int device) {
  const int cc = device_compute_capability(device);
  const std::string sm = std::to_string(cc);
  const std::string dotted = std::to_string(cc / 10) + "." + std::to_string(cc % 10);
  return "opkiln: this GPU (cuda:" + std::to_string(device) + ", sm_" + sm + ", compute capability " + dotted +
         ") is not supported by this opkiln wheel. It carries CUDA kernels for " + compiled_cuda_archs() +
         " (SASS for each arch, PTX only for those marked +PTX), and none of them runs on sm_" + sm +
         ". Install an opkiln wheel built for this GPU, or build one from source with OPKILN_CUDA_ARCHS=\"" + dotted +
         "\". `python -m opkiln doctor` shows the details.";
}

}  // namespace opkiln::kernels
