// What the binding of an RoI op (features [N, C, H, W] or their gradient, rois [K, 5]; see
// common/roi.h) checks before a kernel runs, with the messages every such op shares.
// Include it after facade/facade.h.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/roi.h"
#include "facade/facade.h"

namespace opkiln::facade {

// Same device (and the kernel's), rois [K, 5] of the features' float dtype, pooled sizes >= 0
// (0 is an empty output, as in torchvision; a negative size is a ValueError). `features` is the
// input (forward) or the output gradient (backward), called `name` in the messages.
inline void check_rois(const Tensor& features, const Tensor& rois, std::int64_t pooled_height,
                       std::int64_t pooled_width, DeviceType device, std::string_view op, std::string_view name) {
  check_same_device(features, rois, op, name, "rois");
  check_device(features, device, op, name);
  OPKILN_CHECK(rois.dim() == 2 && rois.size(1) == kernels::kRoiColumns, "opkiln::", op,
               ": rois must have shape [K, 5] (batch index, x1, y1, x2, y2), got ", sizes(rois));
  check_same_dtype(features, rois, op, name, "rois");
  float_kind(features, op, name);
  OPKILN_CHECK_VALUE(pooled_height >= 0 && pooled_width >= 0, "opkiln::", op,
                     ": pooled_height and pooled_width must be >= 0, got ", pooled_height, " and ", pooled_width);
}

// A ValueError naming the first roi of the contiguous `rois` whose batch index is not in
// [0, batch), if any: on the CPU, or on the GPU (one stream synchronisation).
inline void check_batch_index(const Tensor& rois, std::int64_t batch, std::string_view op) {
  const ScalarKind kind = float_kind(rois, op, "rois");
  std::int64_t first_bad = -1;
#if OPKILN_WITH_CUDA
  if (rois.device().type() == DeviceType::CUDA) {
    Workspace flag(kernels::kFirstBadRoiWorkspaceBytes, rois);
    check_cuda(kernels::first_bad_roi_cuda(kind, rois.const_data_ptr(), rois.size(0), batch, flag.data(), &first_bad,
                                           cuda_stream(rois)),
               op);
  } else
#endif
  {
    first_bad = kernels::first_bad_roi_cpu(kind, rois.const_data_ptr(), rois.size(0), batch);
  }
  if (first_bad < 0) return;
  fail(Error::Value, "opkiln::", op, ": rois[", first_bad, ", 0] = ", value_at(rois, first_bad, 0),
       " is a batch index out of range [0, ", batch, ")");
}

}  // namespace opkiln::facade
