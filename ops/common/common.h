// Shared vocabulary of the kernel cores (ops/<op>/<op>.h, <op>_cpu.cpp,
// <op>_cuda.cu). Kernel cores see raw pointers, sizes and this enum only; they
// include no torch header, so one kernel serves both ABI modes unchanged.
#pragma once

#include <cstddef>
#include <cstdint>

struct CUstream_st;  // cudaStream_t is CUstream_st*; declared here to keep CUDA headers out

namespace opkiln::kernels {

enum class ScalarKind : int { Float32, Float64, Float16, BFloat16 };

using CudaStream = CUstream_st*;

// CUDA entry points return 0 on success or a cudaError_t value; the binding
// layer turns a non-zero value into a torch error with cudaGetErrorString.
using CudaStatus = int;

// What a scaffolded kernel (`kiln new-op`) writes until its body is written: finite, so that
// opcheck's eager-versus-compiled comparison passes (NaN never equals itself), and far from any
// value a test's reference gives, so that every value test fails.
constexpr float kNotWritten = -7777.0f;

constexpr bool is_16bit(ScalarKind kind) { return kind == ScalarKind::Float16 || kind == ScalarKind::BFloat16; }

// Device bytes of the float32 workspace a scatter-add backward over numel elements of grad_input
// needs (common/cuda_scatter.cuh): numel floats for float16/bfloat16, none for float32/float64.
constexpr std::size_t scatter_workspace_bytes(ScalarKind kind, std::int64_t numel) {
  return is_16bit(kind) ? static_cast<std::size_t>(numel) * sizeof(float) : 0;
}

}  // namespace opkiln::kernels
