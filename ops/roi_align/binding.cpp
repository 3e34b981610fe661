// opkiln::roi_align (torchvision's semantics and argument order) and its internal backward
// opkiln::_roi_align_backward: torchvision's schemas, on the RoI family's binding
// (facade/roi_family.h), for both ABI modes. Fake impls and autograd: python/opkiln/ops.py.
#include "facade/facade.h"
#include "facade/roi_family.h"
#include "roi_align/roi_align.h"

namespace opkiln::roi_align_binding {
using namespace facade;

constexpr RoiFamilyNames kNames{"roi_align", "_roi_align_backward"};

template <DeviceType D>
Tensor forward(const Tensor& input, const Tensor& rois, double spatial_scale, std::int64_t pooled_height,
               std::int64_t pooled_width, std::int64_t sampling_ratio, bool aligned) {
  return roi_family_forward<kernels::RoiAlign>(
      input, rois, {spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned}, D, kNames);
}

template <DeviceType D>
Tensor backward(const Tensor& grad, const Tensor& rois, double spatial_scale, std::int64_t pooled_height,
                std::int64_t pooled_width, std::int64_t sampling_ratio, bool aligned, std::int64_t batch,
                std::int64_t channels, std::int64_t height, std::int64_t width) {
  return roi_family_backward<kernels::RoiAlign>(grad, rois, nullptr,
                                                {spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned},
                                                {batch, channels, height, width}, D, kNames);
}

OPKILN_SCHEMAS(m) {
  m.def("roi_align(Tensor input, Tensor rois, float spatial_scale, int pooled_height, int pooled_width, "
        "int sampling_ratio, bool aligned) -> Tensor");
  m.def("_roi_align_backward(Tensor grad, Tensor rois, float spatial_scale, int pooled_height, int pooled_width, "
        "int sampling_ratio, bool aligned, int batch, int channels, int height, int width) -> Tensor");
}

OPKILN_ROI_FAMILY_KERNELS("roi_align", "_roi_align_backward")

}  // namespace opkiln::roi_align_binding
