// The CUDA kernel's launcher: raw pointers and sizes, no torch headers (csrc/ring_shift_cuda.cu).
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace ringops {

// out[r, (c + shift) % n] = in[r, c] for rows x n contiguous floats; 0 <= shift < n.
cudaError_t ring_shift_cuda(const float* in, float* out, int64_t rows, int64_t n, int64_t shift,
                            cudaStream_t stream);

}  // namespace ringops
