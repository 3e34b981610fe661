/* The Python extension module `opkiln._C` of the stable-ABI build, compiled
   against the limited API (Py_LIMITED_API = 3.10, set by the build), so one
   cp310-abi3 file serves every CPython >= 3.10. It holds no Python functions:
   importing it runs the static initializers that register the operators with
   torch's dispatcher through the LibTorch stable C shim. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#if !defined(Py_LIMITED_API) || Py_LIMITED_API < 0x030A0000
#error "ops/stable/module.cpp is built for the limited API (Py_LIMITED_API >= 3.10)"
#endif

static struct PyModuleDef opkiln_module = {
    PyModuleDef_HEAD_INIT,
    "_C",
    "opkiln operator registrations, LibTorch stable ABI (use opkiln.ops)",
    -1,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&opkiln_module); }
