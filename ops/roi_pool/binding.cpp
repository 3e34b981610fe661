// opkiln::roi_pool (torchvision's semantics and argument order) and its internal backward
// opkiln::_roi_pool_backward: torchvision's schemas (int for SymInt), on the RoI family's binding
// (facade/roi_family.h), for both ABI modes. Fake impls and autograd: python/opkiln/ops.py.
#include "facade/facade.h"
#include "facade/roi_family.h"
#include "roi_pool/roi_pool.h"

namespace opkiln::roi_pool_binding {
using namespace facade;

constexpr RoiFamilyNames kNames{"roi_pool", "_roi_pool_backward", "argmax"};

template <DeviceType D>
std::tuple<Tensor, Tensor> forward(const Tensor& input, const Tensor& rois, double spatial_scale,
                                   std::int64_t pooled_height, std::int64_t pooled_width) {
  return roi_family_forward<kernels::RoiPool>(input, rois, {spatial_scale, pooled_height, pooled_width}, D, kNames);
}

template <DeviceType D>
Tensor backward(const Tensor& grad, const Tensor& rois, const Tensor& argmax, double spatial_scale,
                std::int64_t pooled_height, std::int64_t pooled_width, std::int64_t batch, std::int64_t channels,
                std::int64_t height, std::int64_t width) {
  return roi_family_backward<kernels::RoiPool>(grad, rois, &argmax, {spatial_scale, pooled_height, pooled_width},
                                               {batch, channels, height, width}, D, kNames);
}

OPKILN_SCHEMAS(m) {
  m.def("roi_pool(Tensor input, Tensor rois, float spatial_scale, int pooled_height, int pooled_width) -> (Tensor, Tensor)");
  m.def("_roi_pool_backward(Tensor grad, Tensor rois, Tensor argmax, float spatial_scale, int pooled_height, "
        "int pooled_width, int batch, int channels, int height, int width) -> Tensor");
}

OPKILN_ROI_FAMILY_KERNELS("roi_pool", "_roi_pool_backward")

}  // namespace opkiln::roi_pool_binding
