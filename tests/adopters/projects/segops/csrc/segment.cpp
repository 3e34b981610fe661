// segops::segment_sum(src, index, size): out[i] = sum of src's rows whose index is i.
// torch-scatter and its family register this way: torch::RegisterOperators, no schema block of torch/library.h.
#include <Python.h>

#include <ATen/core/Tensor.h>
#include <ATen/core/op_registration/op_registration.h>
#include <ATen/ops/zeros.h>

namespace segops {

at::Tensor segment_sum(const at::Tensor& src, const at::Tensor& index, int64_t size) {
  TORCH_CHECK(src.dim() >= 1 && index.dim() == 1 && index.size(0) == src.size(0),
              "segops::segment_sum: index must be 1-D with one entry per row of src");
  TORCH_CHECK(src.scalar_type() == at::kFloat && index.scalar_type() == at::kLong,
              "segops::segment_sum: float32 src and int64 index only");
  const at::Tensor s = src.contiguous();
  const at::Tensor idx = index.contiguous();
  std::vector<int64_t> shape = s.sizes().vec();
  shape[0] = size;
  at::Tensor out = at::zeros(shape, s.options());
  const int64_t row = s.size(0) == 0 ? 0 : s.numel() / s.size(0);
  const float* ps = s.data_ptr<float>();
  const int64_t* pi = idx.data_ptr<int64_t>();
  float* po = out.data_ptr<float>();
  for (int64_t r = 0; r < s.size(0); ++r) {
    TORCH_CHECK(pi[r] >= 0 && pi[r] < size, "segops::segment_sum: index ", pi[r], " outside [0, ", size, ")");
    for (int64_t c = 0; c < row; ++c) {
      po[pi[r] * row + c] += ps[r * row + c];
    }
  }
  return out;
}

}  // namespace segops

static auto registry = torch::RegisterOperators().op(
    "segops::segment_sum(Tensor src, Tensor index, int size) -> Tensor", &segops::segment_sum);

// An importable module with nothing in it: the op lives in torch.ops.segops.
static struct PyModuleDef segment_module = {PyModuleDef_HEAD_INIT, "_segment", nullptr, -1, nullptr};

PyMODINIT_FUNC PyInit__segment(void) { return PyModule_Create(&segment_module); }
