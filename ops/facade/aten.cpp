// The opkiln operator namespace of the per-torch build. Each op adds its
// schemas (OPKILN_SCHEMAS, a TORCH_LIBRARY_FRAGMENT) and kernels in its own
// ops/<op>/binding.cpp; this block only claims the namespace, so a second
// library defining `opkiln` fails loudly.
#include "facade/facade.h"

TORCH_LIBRARY(opkiln, m) { static_cast<void>(m); }
