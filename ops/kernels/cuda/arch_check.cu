// The probe kernel is compiled with the same architecture list as every other
// kernel in this library, so asking the runtime for its attributes answers
// whether any of our images (SASS, or PTX it can JIT) runs on the current GPU.
#include <cuda_runtime.h>

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

}  // namespace opkiln::kernels
