// opkiln::roi_align (torchvision's semantics and argument order) and its
// internal backward opkiln::_roi_align_backward: schemas, argument checks and
// kernel registrations, for both ABI modes (ops/facade/facade.h). Fake impls
// and the autograd formula: python/opkiln/ops.py.
#include <algorithm>

#include "facade/facade.h"
#include "facade/rois.h"
#include "roi_align/roi_align.h"

namespace opkiln::roi_align_binding {
using namespace facade;

constexpr std::string_view kOp = "roi_align";
constexpr std::string_view kBwd = "_roi_align_backward";

kernels::RoiAlignGeometry geometry(std::int64_t batch, std::int64_t channels, std::int64_t height, std::int64_t width,
                                   std::int64_t num_rois, double spatial_scale, std::int64_t pooled_height,
                                   std::int64_t pooled_width, std::int64_t sampling_ratio, bool aligned) {
  kernels::RoiAlignGeometry g;
  g.batch = batch;
  g.channels = channels;
  g.height = height;
  g.width = width;
  g.rois = num_rois;
  g.pooled_height = pooled_height;
  g.pooled_width = pooled_width;
  g.spatial_scale = spatial_scale;
  g.sampling_ratio = sampling_ratio;
  g.aligned = aligned;
  return g;
}

// The forward's checks; returns the geometry of the (contiguous) input and rois.
kernels::RoiAlignGeometry check_forward(const Tensor& input, const Tensor& rois, double spatial_scale,
                                        std::int64_t pooled_height, std::int64_t pooled_width,
                                        std::int64_t sampling_ratio, bool aligned, DeviceType device) {
  check_rois(input, rois, pooled_height, pooled_width, device, kOp, "input");
  OPKILN_CHECK(input.dim() == 4, "opkiln::roi_align: input must have shape [N, C, H, W], got ", sizes(input));
  return geometry(input.size(0), input.size(1), input.size(2), input.size(3), rois.size(0), spatial_scale,
                  pooled_height, pooled_width, sampling_ratio, aligned);
}

// The backward's checks; returns the geometry of the input it differentiates.
kernels::RoiAlignGeometry check_backward(const Tensor& grad, const Tensor& rois, double spatial_scale,
                                         std::int64_t pooled_height, std::int64_t pooled_width,
                                         std::int64_t sampling_ratio, bool aligned, std::int64_t batch,
                                         std::int64_t channels, std::int64_t height, std::int64_t width,
                                         DeviceType device) {
  check_rois(grad, rois, pooled_height, pooled_width, device, kBwd, "grad");
  const Sizes expected{{rois.size(0), channels, pooled_height, pooled_width}};
  OPKILN_CHECK(sizes(grad) == expected, "opkiln::", kBwd, ": grad must have shape [K, C, pooled_height, pooled_width] = ",
               expected, ", got ", sizes(grad));
  OPKILN_CHECK_VALUE(batch >= 0 && channels >= 0 && height >= 0 && width >= 0, "opkiln::", kBwd,
                     ": the input shape must be non-negative, got [", batch, ", ", channels, ", ", height, ", ",
                     width, "]");
  return geometry(batch, channels, height, width, rois.size(0), spatial_scale, pooled_height, pooled_width,
                  sampling_ratio, aligned);
}

// Output planes (or input planes) per task: about 16k bilinear samples each.
std::int64_t plane_grain(std::int64_t plane) { return std::max<std::int64_t>(1, 4096 / std::max<std::int64_t>(1, plane)); }

Tensor forward_cpu(const Tensor& input, const Tensor& rois, double spatial_scale, std::int64_t pooled_height,
                   std::int64_t pooled_width, std::int64_t sampling_ratio, bool aligned) {
  const auto g = check_forward(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned,
                               DeviceType::CPU);
  const Tensor xc = as_contiguous(input);
  const Tensor rc = as_contiguous(rois);
  const ScalarKind kind = float_kind(input, kOp, "input");
  check_batch_index(rc, g.batch, kOp);
  Tensor out = empty({g.rois, g.channels, pooled_height, pooled_width}, input.scalar_type(), input);
  if (out.numel() == 0) return out;
  const void* px = xc.const_data_ptr();
  const void* pr = rc.const_data_ptr();
  void* po = out.mutable_data_ptr();
  parallel_for(0, g.rois * g.channels, plane_grain(pooled_height * pooled_width),
               [&](std::int64_t begin, std::int64_t end) {
                 kernels::roi_align_forward_cpu(kind, g, px, pr, po, begin, end);
               });
  return out;
}

Tensor backward_cpu(const Tensor& grad, const Tensor& rois, double spatial_scale, std::int64_t pooled_height,
                    std::int64_t pooled_width, std::int64_t sampling_ratio, bool aligned, std::int64_t batch,
                    std::int64_t channels, std::int64_t height, std::int64_t width) {
  const auto g = check_backward(grad, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned, batch,
                                channels, height, width, DeviceType::CPU);
  const Tensor gc = as_contiguous(grad);
  const Tensor rc = as_contiguous(rois);
  const ScalarKind kind = float_kind(grad, kBwd, "grad");
  check_batch_index(rc, g.batch, kBwd);
  if (grad.numel() == 0) return zeros({batch, channels, height, width}, grad.scalar_type(), grad);
  Tensor grad_input = empty({batch, channels, height, width}, grad.scalar_type(), grad);
  const void* pg = gc.const_data_ptr();
  const void* pr = rc.const_data_ptr();
  void* pgi = grad_input.mutable_data_ptr();
  parallel_for(0, batch * channels, plane_grain(height * width), [&](std::int64_t begin, std::int64_t end) {
    kernels::roi_align_backward_cpu(kind, g, pg, pr, pgi, begin, end);
  });
  return grad_input;
}

#if OPKILN_WITH_CUDA
Tensor forward_cuda(const Tensor& input, const Tensor& rois, double spatial_scale, std::int64_t pooled_height,
                    std::int64_t pooled_width, std::int64_t sampling_ratio, bool aligned) {
  const auto g = check_forward(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned,
                               DeviceType::CUDA);
  const DeviceGuard guard(input);
  const Tensor xc = as_contiguous(input);
  const Tensor rc = as_contiguous(rois);
  const ScalarKind kind = float_kind(input, kOp, "input");
  check_batch_index(rc, g.batch, kOp);
  Tensor out = empty({g.rois, g.channels, pooled_height, pooled_width}, input.scalar_type(), input);
  if (out.numel() == 0) return out;
  check_cuda(kernels::roi_align_forward_cuda(kind, g, xc.const_data_ptr(), rc.const_data_ptr(), out.mutable_data_ptr(),
                                             cuda_stream(input)),
             kOp);
  return out;
}

Tensor backward_cuda(const Tensor& grad, const Tensor& rois, double spatial_scale, std::int64_t pooled_height,
                     std::int64_t pooled_width, std::int64_t sampling_ratio, bool aligned, std::int64_t batch,
                     std::int64_t channels, std::int64_t height, std::int64_t width) {
  const auto g = check_backward(grad, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned, batch,
                                channels, height, width, DeviceType::CUDA);
  const DeviceGuard guard(grad);
  const Tensor gc = as_contiguous(grad);
  const Tensor rc = as_contiguous(rois);
  const ScalarKind kind = float_kind(grad, kBwd, "grad");
  check_batch_index(rc, g.batch, kBwd);
  if (grad.numel() == 0) return zeros({batch, channels, height, width}, grad.scalar_type(), grad);
  Tensor grad_input = empty({batch, channels, height, width}, grad.scalar_type(), grad);
  if (grad_input.numel() == 0) return grad_input;
  Workspace workspace(kernels::scatter_workspace_bytes(kind, grad_input.numel()), grad);
  check_cuda(kernels::roi_align_backward_cuda(kind, g, gc.const_data_ptr(), rc.const_data_ptr(),
                                              grad_input.mutable_data_ptr(), workspace.data(), workspace.bytes(),
                                              cuda_stream(grad)),
             kBwd);
  return grad_input;
}
#endif

OPKILN_SCHEMAS(m) {
  m.def("roi_align(Tensor input, Tensor rois, float spatial_scale, int pooled_height, int pooled_width, "
        "int sampling_ratio, bool aligned) -> Tensor");
  m.def("_roi_align_backward(Tensor grad, Tensor rois, float spatial_scale, int pooled_height, int pooled_width, "
        "int sampling_ratio, bool aligned, int batch, int channels, int height, int width) -> Tensor");
}

OPKILN_KERNELS(CPU, m) {
  m.impl("roi_align", OPKILN_KERNEL(forward_cpu));
  m.impl("_roi_align_backward", OPKILN_KERNEL(backward_cpu));
}

#if OPKILN_WITH_CUDA
OPKILN_KERNELS(CUDA, m) {
  m.impl("roi_align", OPKILN_KERNEL(forward_cuda));
  m.impl("_roi_align_backward", OPKILN_KERNEL(backward_cuda));
}
#endif

}  // namespace opkiln::roi_align_binding
