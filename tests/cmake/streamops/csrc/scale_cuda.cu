// The CUDA kernel of streamops.scale, launched on torch's current stream: ATen/cuda/CUDAContext.h, which
// includes cublas_v2.h and cusparse.h (headers torch ships in its CUDA library wheels, not the toolkit).
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

namespace {

__global__ void scale_kernel(const float* in, float* out, int64_t n, float alpha) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] = in[i] * alpha;
  }
}

at::Tensor scale_cuda(const at::Tensor& x, double alpha) {
  TORCH_CHECK(x.scalar_type() == at::kFloat, "scale: float32 only");
  const c10::cuda::CUDAGuard guard(x.device());
  const at::Tensor in = x.contiguous();
  at::Tensor out = at::empty_like(in);
  const int64_t n = in.numel();
  if (n > 0) {
    constexpr int threads = 256;
    const auto blocks = static_cast<unsigned int>((n + threads - 1) / threads);
    scale_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        in.data_ptr<float>(), out.data_ptr<float>(), n, static_cast<float>(alpha));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(streamops, CUDA, m) { m.impl("scale", &scale_cuda); }
