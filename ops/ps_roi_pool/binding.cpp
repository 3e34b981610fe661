// opkiln::ps_roi_pool and its internal backward opkiln::_ps_roi_pool_backward: torchvision's
// schemas, on the position-sensitive family's binding (facade/ps_roi.h). Fake impls and
// autograd: python/opkiln/ops.py.
#include "facade/facade.h"
#include "facade/ps_roi.h"
#include "ps_roi_pool/ps_roi_pool.h"

namespace opkiln::ps_roi_pool_binding {
using namespace facade;

constexpr PsRoiNames kNames{"ps_roi_pool", "_ps_roi_pool_backward"};

template <DeviceType D>
std::tuple<Tensor, Tensor> forward(const Tensor& input, const Tensor& rois, double spatial_scale,
                                   std::int64_t pooled_height, std::int64_t pooled_width) {
  return ps_roi_forward<kernels::PsRoiPool>(input, rois, {spatial_scale, pooled_height, pooled_width, -1}, D, kNames);
}

template <DeviceType D>
Tensor backward(const Tensor& grad, const Tensor& rois, const Tensor& channel_mapping, double spatial_scale,
                std::int64_t pooled_height, std::int64_t pooled_width, std::int64_t batch_size, std::int64_t channels,
                std::int64_t height, std::int64_t width) {
  return ps_roi_backward<kernels::PsRoiPool>(grad, rois, channel_mapping, {spatial_scale, pooled_height, pooled_width, -1},
                                             {batch_size, channels, height, width}, D, kNames);
}

OPKILN_SCHEMAS(m) {
  m.def("ps_roi_pool(Tensor input, Tensor rois, float spatial_scale, int pooled_height, int pooled_width) "
        "-> (Tensor, Tensor)");
  m.def("_ps_roi_pool_backward(Tensor grad, Tensor rois, Tensor channel_mapping, float spatial_scale, "
        "int pooled_height, int pooled_width, int batch_size, int channels, int height, int width) -> Tensor");
}

OPKILN_PS_ROI_KERNELS("ps_roi_pool", "_ps_roi_pool_backward")

}  // namespace opkiln::ps_roi_pool_binding
