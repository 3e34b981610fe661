/* The Python extension module `opkiln._C`. It holds no Python functions:
   importing it runs the static initializers that register the operators with
   torch's dispatcher, after which they are reachable as torch.ops.opkiln.*. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static struct PyModuleDef opkiln_module = {
    PyModuleDef_HEAD_INIT,
    "_C",
    "opkiln operator registrations (use opkiln.ops)",
    -1,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&opkiln_module); }
