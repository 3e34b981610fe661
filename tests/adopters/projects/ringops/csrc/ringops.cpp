// ringops::ring_shift(x, shift): x rotated by `shift` places along its last dimension, like
// torch.roll(x, shift, -1). float32; a CPU kernel, and a CUDA one in CUDA builds (KILN_WITH_CUDA).
#include <Python.h>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#if KILN_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "ring_shift.h"
#endif

namespace ringops {
namespace {

struct Shape {
  int64_t rows;
  int64_t n;
  int64_t shift;  // in [0, n)
};

Shape check(const at::Tensor& x, int64_t shift) {
  TORCH_CHECK(x.dim() >= 1, "ringops::ring_shift: x needs at least one dimension");
  TORCH_CHECK(x.scalar_type() == at::kFloat, "ringops::ring_shift: float32 tensors only, got ", x.scalar_type());
  const int64_t n = x.size(-1);
  const int64_t rows = n == 0 ? 0 : x.numel() / n;
  return {rows, n, n == 0 ? 0 : ((shift % n) + n) % n};
}

at::Tensor ring_shift_cpu(const at::Tensor& x, int64_t shift) {
  const Shape s = check(x, shift);
  const at::Tensor in = x.contiguous();
  at::Tensor out = at::empty_like(in);
  const float* src = in.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  for (int64_t r = 0; r < s.rows; ++r) {
    for (int64_t c = 0; c < s.n; ++c) {
      dst[r * s.n + (c + s.shift) % s.n] = src[r * s.n + c];
    }
  }
  return out;
}

#if KILN_WITH_CUDA
at::Tensor ring_shift_cuda_impl(const at::Tensor& x, int64_t shift) {
  const Shape s = check(x, shift);
  const c10::cuda::CUDAGuard guard(x.device());
  const at::Tensor in = x.contiguous();
  at::Tensor out = at::empty_like(in);
  const cudaError_t status = ring_shift_cuda(in.data_ptr<float>(), out.data_ptr<float>(), s.rows, s.n, s.shift,
                                             c10::cuda::getCurrentCUDAStream(x.device().index()).stream());
  TORCH_CHECK(status == cudaSuccess, "ringops::ring_shift: CUDA kernel launch failed: ", cudaGetErrorString(status));
  return out;
}
#endif

}  // namespace
}  // namespace ringops

TORCH_LIBRARY(ringops, m) {
  m.def("ring_shift(Tensor x, int shift) -> Tensor");
}

TORCH_LIBRARY_IMPL(ringops, CPU, m) {
  m.impl("ring_shift", &ringops::ring_shift_cpu);
}

#if KILN_WITH_CUDA
TORCH_LIBRARY_IMPL(ringops, CUDA, m) {
  m.impl("ring_shift", &ringops::ring_shift_cuda_impl);
}
#endif

// Importing ringops._C runs the registrations above; the module itself holds nothing.
static PyModuleDef ringops_module = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr, nullptr, nullptr, nullptr, nullptr};

PyMODINIT_FUNC PyInit__C(void) {
  return PyModule_Create(&ringops_module);
}
