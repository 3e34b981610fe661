// The operator schemas for the stable-ABI build, character for character the
// ones in ops/torch/schema.cpp: python/opkiln/ops.py (wrappers, fake and
// autograd registrations) serves both builds, and tests/stable checks that the
// two files define the same schemas. The build reads the m.def lines of this
// file to write the op manifest into the wheel's build info.
#include <torch/csrc/stable/library.h>

STABLE_TORCH_LIBRARY(opkiln, m) {
  m.def("weighted_sum(Tensor a, Tensor b, float alpha) -> Tensor");
  // rms_norm is composite (it calls _rms_norm_forward); the two internal ops
  // carry the fused kernels, fake impls and, for the forward, autograd.
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor");
  m.def("_rms_norm_forward(Tensor x, Tensor weight, float eps) -> (Tensor, Tensor)");
  m.def("_rms_norm_backward(Tensor grad, Tensor x, Tensor weight, Tensor rstd) -> (Tensor, Tensor)");
  m.def("nms(Tensor boxes, Tensor scores, float iou_threshold) -> Tensor");
}
