// The operator schemas, written once. Every backend adds kernels with
// TORCH_LIBRARY_IMPL in its own file. The build reads the m.def lines of this
// file to write the op manifest into the wheel's build info, so the import
// check can prove that every op shipped is registered.
#include <torch/library.h>

TORCH_LIBRARY(opkiln, m) {
  m.def("weighted_sum(Tensor a, Tensor b, float alpha) -> Tensor");
}
