/* The Python extension module `opkiln._C`. It holds no Python functions:
   importing it runs the static initializers that register the operators with
   torch's dispatcher, after which they are reachable as torch.ops.opkiln.*.
   The stable-ABI build compiles it against the limited API (Py_LIMITED_API =
   3.10, set by the build), so one cp310-abi3 file serves every CPython >= 3.10. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#if OPKILN_STABLE_ABI && (!defined(Py_LIMITED_API) || Py_LIMITED_API < 0x030A0000)
#error "the stable-ABI build of ops/facade/module.cpp is for the limited API (Py_LIMITED_API >= 3.10)"
#endif

static struct PyModuleDef opkiln_module = {
    PyModuleDef_HEAD_INIT,
    "_C",
#if OPKILN_STABLE_ABI
    "opkiln operator registrations, LibTorch stable ABI (use opkiln.ops)",
#else
    "opkiln operator registrations (use opkiln.ops)",
#endif
    -1,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&opkiln_module); }
