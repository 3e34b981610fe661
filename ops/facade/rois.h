// What the binding of an RoI op (features [N, C, H, W] or their gradient, rois [K, 5]; see
// common/roi.h) checks before a kernel runs, with the messages every such op shares.
// Include it after facade/facade.h.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "common/roi.h"
#include "facade/facade.h"

namespace opkiln::facade {

// The input shape an RoI op's backward differentiates, [N, C, H, W].
struct InputShape {
  std::int64_t batch, channels, height, width;
};

// A box layout: how many values a roi row has and what they are, for the messages (column 0 is the
// batch index). torchvision's is the default; a family member may read another (common/roi_family.h).
struct RoiLayout {
  std::int64_t columns = kernels::kRoiColumns;
  std::string_view names = "batch index, x1, y1, x2, y2";
};

// Same device (and the kernel's), rois [K, layout.columns] of the features' float dtype, pooled
// sizes >= 0 (0 is an empty output, as in torchvision; a negative size is a ValueError).
// `features` is the input (forward) or the output gradient (backward), called `name` in the messages.
inline void check_rois(const Tensor& features, const Tensor& rois, std::int64_t pooled_height,
                       std::int64_t pooled_width, DeviceType device, std::string_view op, std::string_view name,
                       const RoiLayout& layout = {}) {
  check_same_device(features, rois, op, name, "rois");
  check_device(features, device, op, name);
  OPKILN_CHECK(rois.dim() == 2 && rois.size(1) == layout.columns, "opkiln::", op, ": rois must have shape [K, ",
               layout.columns, "] (", layout.names, "), got ", sizes(rois));
  check_same_dtype(features, rois, op, name, "rois");
  float_kind(features, op, name);
  OPKILN_CHECK_VALUE(pooled_height >= 0 && pooled_width >= 0, "opkiln::", op,
                     ": pooled_height and pooled_width must be >= 0, got ", pooled_height, " and ", pooled_width);
}

// A ValueError naming the first roi of the contiguous `rois` [K, columns] whose batch index is not in
// [0, batch), if any: on the CPU, or on the GPU (one stream synchronisation).
inline void check_batch_index(const Tensor& rois, std::int64_t batch, std::string_view op) {
  const ScalarKind kind = float_kind(rois, op, "rois");
  std::int64_t first_bad = -1;
#if OPKILN_WITH_CUDA
  if (rois.device().type() == DeviceType::CUDA) {
    Workspace flag(kernels::kFirstBadRoiWorkspaceBytes, rois);
    check_cuda(kernels::first_bad_roi_cuda(kind, rois.const_data_ptr(), rois.size(0), rois.size(1), batch, flag.data(),
                                           &first_bad, cuda_stream(rois)),
               op);
  } else
#endif
  {
    first_bad = kernels::first_bad_roi_cpu(kind, rois.const_data_ptr(), rois.size(0), rois.size(1), batch);
  }
  if (first_bad < 0) return;
  fail(Error::Value, "opkiln::", op, ": rois[", first_bad, ", 0] = ", value_at(rois, first_bad, 0),
       " is a batch index out of range [0, ", batch, ")");
}

// Planes per parallel task of an RoI op's CPU kernel: about 4096 values each.
inline std::int64_t roi_plane_grain(std::int64_t plane) {
  return std::max<std::int64_t>(1, 4096 / std::max<std::int64_t>(1, plane));
}

// The contiguous features (input or grad) and rois a kernel reads, their kind, the batch index checked.
struct RoiInputs {
  Tensor features, rois;
  ScalarKind kind;
};

inline RoiInputs roi_inputs(const Tensor& features, const Tensor& rois, std::int64_t batch, std::string_view op,
                            std::string_view name) {
  RoiInputs r{as_contiguous(features), as_contiguous(rois), float_kind(features, op, name)};
  check_batch_index(r.rois, batch, op);
  return r;
}

// An RoI op's backward after its own checks, the same for every RoI op: the device guard, grad
// and rois contiguous, the batch index checked, grad_input [N, C, H, W] (zeros when grad is empty:
// no kernel runs), then its kernel: on the CPU cpu(kind, grad, rois, grad_input, begin, end) over
// ranges of the N * C planes in parallel; on CUDA cuda(kind, grad, rois, grad_input, workspace,
// workspace_bytes, stream) with the scatter workspace (common/cuda_scatter.cuh). `cuda` is a
// generic lambda (auto parameters), so that a CPU build never instantiates it.
template <typename Cpu, typename Cuda>
Tensor roi_backward_launch(const Tensor& grad, const Tensor& rois, const InputShape& in, DeviceType device,
                           std::string_view op, Cpu&& cpu, Cuda&& cuda) {
#if OPKILN_WITH_CUDA
  std::optional<DeviceGuard> guard;
  if (device == DeviceType::CUDA) guard.emplace(grad);
#else
  static_cast<void>(device), static_cast<void>(cuda);
#endif
  const RoiInputs r = roi_inputs(grad, rois, in.batch, op, "grad");
  const std::vector<std::int64_t> shape{in.batch, in.channels, in.height, in.width};
  if (grad.numel() == 0) return zeros(shape, grad.scalar_type(), grad);
  Tensor grad_input = empty(shape, grad.scalar_type(), grad);
  if (grad_input.numel() == 0) return grad_input;
  const void* pg = r.features.const_data_ptr();
  const void* pr = r.rois.const_data_ptr();
  void* pgi = grad_input.mutable_data_ptr();
#if OPKILN_WITH_CUDA
  if (device == DeviceType::CUDA) {
    Workspace workspace(kernels::scatter_workspace_bytes(r.kind, grad_input.numel()), grad);
    check_cuda(cuda(r.kind, pg, pr, pgi, workspace.data(), workspace.bytes(), cuda_stream(grad)), op);
    return grad_input;
  }
#endif
  parallel_for(0, in.batch * in.channels, roi_plane_grain(in.height * in.width),
               [&](std::int64_t begin, std::int64_t end) { cpu(r.kind, pg, pr, pgi, begin, end); });
  return grad_input;
}

}  // namespace opkiln::facade

// Registers forward<DeviceType::CPU/CUDA> and backward<...> (the binding's function templates)
// as the CPU and CUDA kernels of the ops named `fwd` and `bwd` (an RoI op's forward and backward).
#if OPKILN_WITH_CUDA
#define OPKILN_ROI_CUDA_KERNELS_(fwd, bwd)                              \
  OPKILN_KERNELS(CUDA, m) {                                                    \
    m.impl(fwd, OPKILN_KERNEL(forward<::opkiln::facade::DeviceType::CUDA>));   \
    m.impl(bwd, OPKILN_KERNEL(backward<::opkiln::facade::DeviceType::CUDA>));  \
  }
#else
#define OPKILN_ROI_CUDA_KERNELS_(fwd, bwd)
#endif
#define OPKILN_ROI_KERNELS(fwd, bwd)                                   \
  OPKILN_KERNELS(CPU, m) {                                                    \
    m.impl(fwd, OPKILN_KERNEL(forward<::opkiln::facade::DeviceType::CPU>));   \
    m.impl(bwd, OPKILN_KERNEL(backward<::opkiln::facade::DeviceType::CPU>));  \
  }                                                                           \
  OPKILN_ROI_CUDA_KERNELS_(fwd, bwd)
