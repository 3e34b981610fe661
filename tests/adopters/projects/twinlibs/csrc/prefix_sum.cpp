// twinlibs::prefix_sum(x) = the inclusive running sum of x over its last dimension (float32, CPU).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

namespace twinlibs {

at::Tensor prefix_sum_cpu(const at::Tensor& x) {
  TORCH_CHECK(x.dim() >= 1, "twinlibs::prefix_sum: x needs at least one dimension");
  TORCH_CHECK(x.scalar_type() == at::kFloat, "twinlibs::prefix_sum: float32 tensors only");
  const at::Tensor xc = x.contiguous();
  at::Tensor out = at::empty_like(xc);
  const int64_t row = xc.size(-1);
  const int64_t rows = row == 0 ? 0 : xc.numel() / row;
  const float* px = xc.data_ptr<float>();
  float* po = out.data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r) {
    float sum = 0.0f;
    for (int64_t i = 0; i < row; ++i) {
      sum += px[r * row + i];
      po[r * row + i] = sum;
    }
  }
  return out;
}

}  // namespace twinlibs

TORCH_LIBRARY_FRAGMENT(twinlibs, m) {
  m.def("prefix_sum(Tensor x) -> Tensor");
}

TORCH_LIBRARY_IMPL(twinlibs, CPU, m) {
  m.impl("prefix_sum", &twinlibs::prefix_sum_cpu);
}
