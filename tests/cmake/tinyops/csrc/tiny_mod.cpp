// torch.ops.tinyops.tiny_mul, registered when Python imports the extension module _tiny_mod.
#include <Python.h>
#include <torch/library.h>

namespace {

at::Tensor tiny_mul(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.sizes() == b.sizes(), "tiny_mul: shapes differ");
  return a.mul(b);
}

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_tiny_mod", nullptr, -1, nullptr, nullptr, nullptr, nullptr,
                          nullptr};

}  // namespace

TORCH_LIBRARY_FRAGMENT(tinyops, m) { m.def("tiny_mul(Tensor a, Tensor b) -> Tensor"); }

TORCH_LIBRARY_IMPL(tinyops, CPU, m) { m.impl("tiny_mul", &tiny_mul); }

PyMODINIT_FUNC PyInit__tiny_mod(void) { return PyModule_Create(&module_def); }
