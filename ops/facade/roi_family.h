// The binding of an RoI-family op (common/roi_family.h: roi_align, roi_pool), written once: the
// checks (rois in the op's box layout), the contiguous inputs, the batch-index check, the outputs'
// allocation, the workspace and the CPU/CUDA dispatch. A member op's binding.cpp calls roi_family_forward / roi_family_backward
// with its per-bin math `Op` from functions of its own schema's signature, and registers them
// with OPKILN_ROI_FAMILY_KERNELS. Include it after facade/facade.h.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

#include "common/roi_family.h"
#include "facade/facade.h"
#include "facade/rois.h"

namespace opkiln::facade {

// The family's parameters (sampling_ratio and aligned: roi_align's; -1 and false for roi_pool); an
// op's own (Op::Params) go to roi_family_forward/backward as their last argument.
struct RoiFamilyArgs {
  double spatial_scale;
  std::int64_t pooled_height, pooled_width, sampling_ratio = -1;
  bool aligned = false;
};

// The names the messages use: the forward op, its backward, and (Op::kIndex) the index tensor.
struct RoiFamilyNames {
  std::string_view forward, backward, index = "index";
};

inline kernels::RoiFamilyGeometry roi_family_geometry(const InputShape& in, std::int64_t num_rois,
                                                      const RoiFamilyArgs& a) {
  kernels::RoiFamilyGeometry g;
  static_cast<kernels::RoiShape&>(g) = {in.batch, in.channels, in.height, in.width, num_rois, a.pooled_height,
                                        a.pooled_width, a.spatial_scale};
  g.sampling_ratio = a.sampling_ratio;
  g.aligned = a.aligned;
  return g;
}

// The geometry Op's drivers take (common/roi_family.h: RoiGeometry<Op>), with the op's own
// parameters where it has them (Op::Params).
template <typename Op>
kernels::RoiGeometry<Op> roi_geometry_of(const kernels::RoiFamilyGeometry& base, const kernels::RoiParams<Op>& params) {
  if constexpr (std::is_same_v<kernels::RoiGeometry<Op>, kernels::RoiFamilyGeometry>) {
    static_cast<void>(params);
    return base;
  } else {
    kernels::RoiGeometry<Op> g;
    static_cast<kernels::RoiFamilyGeometry&>(g) = base;
    g.params = params;
    return g;
  }
}

// The box layout Op reads (common/roi_family.h: kBoxColumns, kBoxLayout).
template <typename Op>
constexpr RoiLayout roi_layout() {
  return {kernels::kBoxColumns<Op>, kernels::kBoxLayout<Op>};
}

// Op::kIndex: (output, index int32); else the output.
template <typename Op>
using RoiFamilyForward = std::conditional_t<Op::kIndex, std::tuple<Tensor, Tensor>, Tensor>;

template <typename Op>
RoiFamilyForward<Op> roi_family_forward(const Tensor& input, const Tensor& rois, const RoiFamilyArgs& a,
                                        DeviceType device, RoiFamilyNames names,
                                        const kernels::RoiParams<Op>& params = {}) {
  const std::string_view op = names.forward;
  check_rois(input, rois, a.pooled_height, a.pooled_width, device, op, "input", roi_layout<Op>());
  OPKILN_CHECK(input.dim() == 4, "opkiln::", op, ": input must have shape [N, C, H, W], got ", sizes(input));
  const auto g = roi_geometry_of<Op>(
      roi_family_geometry({input.size(0), input.size(1), input.size(2), input.size(3)}, rois.size(0), a), params);
#if OPKILN_WITH_CUDA
  std::optional<DeviceGuard> guard;
  if (device == DeviceType::CUDA) guard.emplace(input);
#endif
  const RoiInputs r = roi_inputs(input, rois, g.batch, op, "input");
  const std::vector<std::int64_t> shape{g.rois, g.channels, g.pooled_height, g.pooled_width};
  Tensor out = empty(shape, input.scalar_type(), input);
  std::optional<Tensor> index;
  std::int32_t* pi = nullptr;
  if constexpr (Op::kIndex) {
    index.emplace(empty(shape, ScalarType::Int, input));
    pi = index->mutable_data_ptr<std::int32_t>();
  }
  const auto result = [&]() -> RoiFamilyForward<Op> {
    if constexpr (Op::kIndex) {
      return {out, *index};
    } else {
      return out;
    }
  };
  if (out.numel() == 0) return result();
  const void* px = r.features.const_data_ptr();
  const void* pr = r.rois.const_data_ptr();
  void* po = out.mutable_data_ptr();
#if OPKILN_WITH_CUDA
  if (device == DeviceType::CUDA) {
    check_cuda(kernels::roi_family_forward_cuda<Op>(r.kind, g, px, pr, po, pi, cuda_stream(input)), op);
    return result();
  }
#endif
  parallel_for(0, g.rois * g.channels, roi_plane_grain(g.pooled_height * g.pooled_width),
               [&](std::int64_t begin, std::int64_t end) {
                 kernels::roi_family_forward_cpu<Op>(r.kind, g, px, pr, po, pi, begin, end);
               });
  return result();
}

// index: the forward's (Op::kIndex), checked to be int32 of grad's shape; nullptr otherwise.
template <typename Op>
Tensor roi_family_backward(const Tensor& grad, const Tensor& rois, const Tensor* index, const RoiFamilyArgs& a,
                           const InputShape& in, DeviceType device, RoiFamilyNames names,
                           const kernels::RoiParams<Op>& params = {}) {
  const std::string_view op = names.backward;
  check_rois(grad, rois, a.pooled_height, a.pooled_width, device, op, "grad", roi_layout<Op>());
  if (index != nullptr) check_same_device(grad, *index, op, "grad", names.index);
  OPKILN_CHECK_VALUE(in.batch >= 0 && in.channels >= 0 && in.height >= 0 && in.width >= 0, "opkiln::", op,
                     ": the input shape must be non-negative, got [", in.batch, ", ", in.channels, ", ", in.height,
                     ", ", in.width, "]");
  const auto g = roi_geometry_of<Op>(roi_family_geometry(in, rois.size(0), a), params);
  const Sizes expected{{g.rois, g.channels, g.pooled_height, g.pooled_width}};
  OPKILN_CHECK(sizes(grad) == expected, "opkiln::", op, ": grad must have shape [K, C, pooled_height, ",
               "pooled_width] = ", expected, ", got ", sizes(grad));
  std::optional<Tensor> ic;
  const std::int32_t* pi = nullptr;
  if (index != nullptr) {
    OPKILN_CHECK(index->scalar_type() == ScalarType::Int && sizes(*index) == expected, "opkiln::", op, ": ",
                 names.index, " must be int32 of grad's shape ", expected, ", got ", index->scalar_type(), " ",
                 sizes(*index));
    ic.emplace(as_contiguous(*index));
    pi = static_cast<const std::int32_t*>(ic->const_data_ptr());
  }
  return roi_backward_launch(
      grad, rois, in, device, op,
      [&](ScalarKind kind, const void* pg, const void* pr, void* pgi, std::int64_t begin, std::int64_t end) {
        kernels::roi_family_backward_cpu<Op>(kind, g, pg, pr, pi, pgi, begin, end);
      },
      [&](auto kind, auto pg, auto pr, auto pgi, auto workspace, auto bytes, auto stream) {
        return kernels::roi_family_backward_cuda<Op>(kind, g, pg, pr, pi, pgi, workspace, bytes, stream);
      });
}

}  // namespace opkiln::facade

// Registers the binding's forward<DeviceType::CPU/CUDA> and backward<...> (facade/rois.h).
#define OPKILN_ROI_FAMILY_KERNELS(fwd, bwd) OPKILN_ROI_KERNELS(fwd, bwd)
