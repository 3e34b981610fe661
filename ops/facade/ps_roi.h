// The binding of a position-sensitive RoI op (common/ps_roi.h), written once: the checks, the
// contiguous inputs, the batch-index check, the outputs' allocation and the CPU/CUDA dispatch.
// A member op's binding.cpp calls ps_roi_forward / ps_roi_backward with its per-bin math `Op`
// from functions of its own schema's signature, and registers them with OPKILN_PS_ROI_KERNELS.
// Include it after facade/facade.h.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string_view>
#include <tuple>
#include <vector>

#include "common/ps_roi.h"
#include "facade/facade.h"
#include "facade/rois.h"

namespace opkiln::facade {

// The op's parameters (sampling_ratio: ps_roi_align's; -1 for ps_roi_pool).
struct PsRoiArgs {
  double spatial_scale;
  std::int64_t pooled_height, pooled_width, sampling_ratio;
};

// The names the messages use: the forward op and its backward.
struct PsRoiNames {
  std::string_view forward, backward;
};

inline kernels::PsRoiGeometry ps_roi_geometry(const InputShape& in, std::int64_t num_rois, const PsRoiArgs& a,
                                              std::string_view op) {
  OPKILN_CHECK_VALUE(a.pooled_height > 0 && a.pooled_width > 0, "opkiln::", op,
                     ": pooled_height and pooled_width must be positive, got ", a.pooled_height, " and ",
                     a.pooled_width);
  const std::int64_t bins = a.pooled_height * a.pooled_width;
  OPKILN_CHECK(in.channels % bins == 0, "opkiln::", op, ": input channels (", in.channels,
               ") must be a multiple of pooled_height * pooled_width (", bins, ")");
  kernels::PsRoiGeometry g;
  static_cast<kernels::RoiShape&>(g) = {in.batch, in.channels, in.height, in.width, num_rois, a.pooled_height,
                                        a.pooled_width, a.spatial_scale};
  g.channels_out = in.channels / bins;
  g.sampling_ratio = a.sampling_ratio;
  return g;
}

template <typename Op>
std::tuple<Tensor, Tensor> ps_roi_forward(const Tensor& input, const Tensor& rois, const PsRoiArgs& a,
                                          DeviceType device, PsRoiNames names) {
  const std::string_view op = names.forward;
  check_rois(input, rois, a.pooled_height, a.pooled_width, device, op, "input");
  OPKILN_CHECK(input.dim() == 4, "opkiln::", op, ": input must have shape [N, C, H, W], got ", sizes(input));
  const auto g = ps_roi_geometry({input.size(0), input.size(1), input.size(2), input.size(3)}, rois.size(0), a, op);
#if OPKILN_WITH_CUDA
  std::optional<DeviceGuard> guard;
  if (device == DeviceType::CUDA) guard.emplace(input);
#endif
  const RoiInputs r = roi_inputs(input, rois, g.batch, op, "input");
  const ScalarKind kind = r.kind;
  const std::vector<std::int64_t> shape{g.rois, g.channels_out, g.pooled_height, g.pooled_width};
  Tensor out = empty(shape, input.scalar_type(), input);
  Tensor mapping = empty(shape, ScalarType::Int, input);
  if (out.numel() == 0) return {out, mapping};
  const void* px = r.features.const_data_ptr();
  const void* pr = r.rois.const_data_ptr();
  void* po = out.mutable_data_ptr();
  auto* pm = mapping.mutable_data_ptr<std::int32_t>();
#if OPKILN_WITH_CUDA
  if (device == DeviceType::CUDA) {
    check_cuda(kernels::ps_roi_forward_cuda<Op>(kind, g, px, pr, po, pm, cuda_stream(input)), op);
    return {out, mapping};
  }
#endif
  parallel_for(0, g.rois * g.channels_out, roi_plane_grain(g.pooled_height * g.pooled_width),
               [&](std::int64_t begin, std::int64_t end) {
                 kernels::ps_roi_forward_cpu<Op>(kind, g, px, pr, po, pm, begin, end);
               });
  return {out, mapping};
}

// channel_mapping is checked (int32, grad's shape) but not read: the mapping is fixed by the
// position (common/ps_roi.h), as the forward wrote it.
template <typename Op>
Tensor ps_roi_backward(const Tensor& grad, const Tensor& rois, const Tensor& channel_mapping, const PsRoiArgs& a,
                       const InputShape& in, DeviceType device, PsRoiNames names) {
  const std::string_view op = names.backward;
  check_rois(grad, rois, a.pooled_height, a.pooled_width, device, op, "grad");
  check_same_device(grad, channel_mapping, op, "grad", "channel_mapping");
  OPKILN_CHECK_VALUE(in.batch >= 0 && in.channels >= 0 && in.height >= 0 && in.width >= 0, "opkiln::", op,
                     ": the input shape must be non-negative, got [", in.batch, ", ", in.channels, ", ", in.height,
                     ", ", in.width, "]");
  const auto g = ps_roi_geometry(in, rois.size(0), a, op);
  const Sizes expected{{g.rois, g.channels_out, g.pooled_height, g.pooled_width}};
  OPKILN_CHECK(sizes(grad) == expected, "opkiln::", op, ": grad must have shape [K, C / (pooled_height * ",
               "pooled_width), pooled_height, pooled_width] = ", expected, ", got ", sizes(grad));
  OPKILN_CHECK(channel_mapping.scalar_type() == ScalarType::Int && sizes(channel_mapping) == expected, "opkiln::", op,
               ": channel_mapping must be int32 of grad's shape ", expected, ", got ", channel_mapping.scalar_type(),
               " ", sizes(channel_mapping));
  return roi_backward_launch(
      grad, rois, in, device, op,
      [&](ScalarKind kind, const void* pg, const void* pr, void* pgi, std::int64_t begin, std::int64_t end) {
        kernels::ps_roi_backward_cpu<Op>(kind, g, pg, pr, pgi, begin, end);
      },
      [&](auto kind, auto pg, auto pr, auto pgi, auto workspace, auto bytes, auto stream) {
        return kernels::ps_roi_backward_cuda<Op>(kind, g, pg, pr, pgi, workspace, bytes, stream);
      });
}

}  // namespace opkiln::facade

// Registers the binding's forward<DeviceType::CPU/CUDA> and backward<...> (facade/rois.h).
#define OPKILN_PS_ROI_KERNELS(fwd, bwd) OPKILN_ROI_KERNELS(fwd, bwd)
