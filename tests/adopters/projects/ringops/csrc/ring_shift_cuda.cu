#include "ring_shift.h"

namespace ringops {
namespace {

__global__ void ring_shift_kernel(const float* in, float* out, int64_t rows, int64_t n, int64_t shift) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * n) {
    return;
  }
  const int64_t row = i / n;
  const int64_t column = i % n;
  out[row * n + (column + shift) % n] = in[i];
}

}  // namespace

cudaError_t ring_shift_cuda(const float* in, float* out, int64_t rows, int64_t n, int64_t shift,
                            cudaStream_t stream) {
  const int64_t total = rows * n;
  if (total == 0) {
    return cudaSuccess;
  }
  constexpr int threads = 256;
  const auto blocks = static_cast<unsigned int>((total + threads - 1) / threads);
  ring_shift_kernel<<<blocks, threads, 0, stream>>>(in, out, rows, n, shift);
  return cudaGetLastError();
}

}  // namespace ringops
