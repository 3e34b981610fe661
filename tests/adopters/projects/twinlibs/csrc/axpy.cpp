// twinlibs::axpy(x, y, alpha) = alpha * x + y, elementwise over float32 CPU tensors of one shape.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

namespace twinlibs {

at::Tensor axpy_cpu(const at::Tensor& x, const at::Tensor& y, double alpha) {
  TORCH_CHECK(x.sizes() == y.sizes(), "twinlibs::axpy: x is ", x.sizes(), " but y is ", y.sizes());
  TORCH_CHECK(x.scalar_type() == at::kFloat && y.scalar_type() == at::kFloat,
              "twinlibs::axpy: float32 tensors only");
  const at::Tensor xc = x.contiguous();
  const at::Tensor yc = y.contiguous();
  at::Tensor out = at::empty_like(xc);
  const float* px = xc.data_ptr<float>();
  const float* py = yc.data_ptr<float>();
  float* po = out.data_ptr<float>();
  const auto a = static_cast<float>(alpha);
  for (int64_t i = 0; i < xc.numel(); ++i) {
    po[i] = a * px[i] + py[i];
  }
  return out;
}

}  // namespace twinlibs

TORCH_LIBRARY_FRAGMENT(twinlibs, m) {
  m.def("axpy(Tensor x, Tensor y, float alpha) -> Tensor");
}

TORCH_LIBRARY_IMPL(twinlibs, CPU, m) {
  m.impl("axpy", &twinlibs::axpy_cpu);
}
