// torch.ops.tinyops.tiny_add, in a library loaded with torch.ops.load_library: nothing exported, the
// static registrations below run all the same.
#include <torch/library.h>

namespace {

at::Tensor tiny_add(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.sizes() == b.sizes(), "tiny_add: shapes differ");
  return a.add(b);
}

}  // namespace

TORCH_LIBRARY(tinyops, m) { m.def("tiny_add(Tensor a, Tensor b) -> Tensor"); }

TORCH_LIBRARY_IMPL(tinyops, CPU, m) { m.impl("tiny_add", &tiny_add); }
