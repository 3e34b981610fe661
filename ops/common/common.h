// Shared vocabulary of the kernel cores (ops/<op>/<op>.h, <op>_cpu.cpp,
// <op>_cuda.cu). Kernel cores see raw pointers, sizes and this enum only; they
// include no torch header, so one kernel serves both ABI modes unchanged.
#pragma once

#include <cstdint>

struct CUstream_st;  // cudaStream_t is CUstream_st*; declared here to keep CUDA headers out

namespace opkiln::kernels {

enum class ScalarKind : int { Float32, Float64, Float16, BFloat16 };

using CudaStream = CUstream_st*;

// CUDA entry points return 0 on success or a cudaError_t value; the binding
// layer turns a non-zero value into a torch error with cudaGetErrorString.
using CudaStatus = int;

}  // namespace opkiln::kernels
