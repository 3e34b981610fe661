// The batch-index check of common/roi.h on the CPU.
#include "common/half_float.h"
#include "common/roi.h"

namespace opkiln::kernels {

std::int64_t first_bad_roi_cpu(ScalarKind kind, const void* rois, std::int64_t num_rois, std::int64_t columns,
                               std::int64_t batch) {
  return cpu::dispatch_float_kinds(static_cast<int>(kind), [&]<typename T>() -> std::int64_t {
    const T* r = static_cast<const T*>(rois);
    for (std::int64_t k = 0; k < num_rois; ++k) {
      if (!batch_index_valid(cpu::Convert<T>::load(r[k * columns]), batch)) return k;
    }
    return -1;
  });
}

}  // namespace opkiln::kernels
