// Whether this library's CUDA kernels carry an image (SASS or PTX) that runs on
// the current GPU. No torch headers: the binding layer turns the answer into a
// torch error that names the GPU's arch and the archs compiled in.
#pragma once

#include <string>

#include "common.h"

namespace opkiln::kernels {

// 0 when the kernels have an image for the current device;
// cudaErrorNoKernelImageForDevice when none of their SASS or PTX runs on it;
// another cudaError_t value when the device cannot be queried.
CudaStatus kernel_image_status();

// Compute capability of `device` as major * 10 + minor (sm_90 -> 90), or -1.
int device_compute_capability(int device);

// The arch list the kernels were compiled for, TORCH_CUDA_ARCH_LIST syntax,
// comma-separated (e.g. "7.5,8.0,9.0,12.0+PTX": SASS each, PTX where +PTX).
const char* compiled_cuda_archs();

// kernel_image_status() for `device` (the current device), asked once per device:
// a success is remembered, so later launches pay nothing.
CudaStatus cached_kernel_image_status(int device);

// True for the status an unsupported GPU gives (cudaErrorNoKernelImageForDevice).
bool is_unsupported_gpu(CudaStatus status);

// What a user with an unsupported GPU is told, instead of "no kernel image is
// available for execution on the device": the GPU's arch, ours, and the fix.
std::string unsupported_gpu_message(int device);

}  // namespace opkiln::kernels
