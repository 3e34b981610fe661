// out = alpha * a + (1 - alpha) * b, elementwise over n contiguous elements.
#pragma once

#include "common/common.h"

namespace opkiln::kernels {

// Computes elements [begin, end); the binding splits work across threads.
void weighted_sum_cpu(ScalarKind kind, const void* a, const void* b, void* out,
                      std::int64_t begin, std::int64_t end, double alpha);

CudaStatus weighted_sum_cuda(ScalarKind kind, const void* a, const void* b, void* out,
                             std::int64_t n, double alpha, CudaStream stream);

}  // namespace opkiln::kernels
