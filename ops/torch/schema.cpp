// The operator schemas, written once. Every backend adds kernels with
// TORCH_LIBRARY_IMPL in its own file. The build reads the m.def lines of this
// file to write the op manifest into the wheel's build info, so the import
// check can prove that every op shipped is registered.
#include <torch/library.h>

TORCH_LIBRARY(opkiln, m) {
  m.def("weighted_sum(Tensor a, Tensor b, float alpha) -> Tensor");
  // rms_norm is composite (it calls _rms_norm_forward); the two internal ops
  // carry the fused kernels, fake impls and, for the forward, autograd.
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor");
  m.def("_rms_norm_forward(Tensor x, Tensor weight, float eps) -> (Tensor, Tensor)");
  m.def("_rms_norm_backward(Tensor grad, Tensor x, Tensor weight, Tensor rstd) -> (Tensor, Tensor)");
  m.def("nms(Tensor boxes, Tensor scores, float iou_threshold) -> Tensor");
}
