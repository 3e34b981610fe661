// torch.ops.streamops.scale: x * alpha; the CPU kernel here, the CUDA one in scale_cuda.cu.
#include <Python.h>
#include <torch/library.h>

namespace {

at::Tensor scale_cpu(const at::Tensor& x, double alpha) { return x.mul(alpha); }

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr, nullptr, nullptr, nullptr, nullptr};

}  // namespace

TORCH_LIBRARY(streamops, m) { m.def("scale(Tensor x, float alpha) -> Tensor"); }

TORCH_LIBRARY_IMPL(streamops, CPU, m) { m.impl("scale", &scale_cpu); }

PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&module_def); }
