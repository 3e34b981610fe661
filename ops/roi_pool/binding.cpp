// opkiln::roi_pool (torchvision's semantics and argument order) and its internal backward
// opkiln::_roi_pool_backward: schemas, argument checks and kernel registrations, for both ABI
// modes (ops/facade/facade.h). Fake impls and autograd: python/opkiln/ops.py.
#include <tuple>

#include "roi_pool/roi_pool.h"
#include "facade/facade.h"
#include "facade/rois.h"

namespace opkiln::roi_pool_binding {
using namespace facade;

constexpr std::string_view kOp = "roi_pool";
constexpr std::string_view kBwd = "_roi_pool_backward";

// A pooled tensor's sizes, [K, C, PH, PW].
std::vector<std::int64_t> pooled(const kernels::RoiShape& s) {
  return {s.rois, s.channels, s.pooled_height, s.pooled_width};
}

// The forward's contiguous inputs, its shape and its allocated outputs.
struct Forward {
  ScalarKind kind;
  kernels::RoiShape shape;
  Tensor input, rois, output, argmax;
};

Forward prepare(const Tensor& input, const Tensor& rois, double spatial_scale, std::int64_t pooled_height,
                std::int64_t pooled_width, DeviceType device) {
  check_rois(input, rois, pooled_height, pooled_width, device, kOp, "input");
  OPKILN_CHECK(input.dim() == 4, "opkiln::roi_pool: input must have shape [N, C, H, W], got ", sizes(input));
  const kernels::RoiShape s{input.size(0), input.size(1), input.size(2), input.size(3), rois.size(0),
                                pooled_height,  pooled_width,  spatial_scale};
  Forward f{float_kind(input, kOp, "input"), s, as_contiguous(input), as_contiguous(rois),
            empty(pooled(s), input.scalar_type(), input), empty(pooled(s), ScalarType::Int, input)};
  check_batch_index(f.rois, s.batch, kOp);
  return f;
}

std::tuple<Tensor, Tensor> roi_pool_cpu(const Tensor& input, const Tensor& rois, double spatial_scale,
                                        std::int64_t pooled_height, std::int64_t pooled_width) {
  Forward f = prepare(input, rois, spatial_scale, pooled_height, pooled_width, DeviceType::CPU);
  const void* px = f.input.const_data_ptr();
  const void* pr = f.rois.const_data_ptr();
  void* po = f.output.mutable_data_ptr();
  auto* pa = f.argmax.mutable_data_ptr<std::int32_t>();
  parallel_for(0, f.shape.rois * f.shape.channels, std::max<std::int64_t>(1, 4096 / std::max<std::int64_t>(
                   1, pooled_height * pooled_width)), [&](std::int64_t begin, std::int64_t end) {
    kernels::roi_pool_cpu(f.kind, f.shape, px, pr, po, pa, begin, end);
  });
  return {f.output, f.argmax};
}

#if OPKILN_WITH_CUDA
std::tuple<Tensor, Tensor> roi_pool_cuda(const Tensor& input, const Tensor& rois, double spatial_scale,
                                         std::int64_t pooled_height, std::int64_t pooled_width) {
  const DeviceGuard guard(input);
  Forward f = prepare(input, rois, spatial_scale, pooled_height, pooled_width, DeviceType::CUDA);
  check_cuda(kernels::roi_pool_cuda(f.kind, f.shape, f.input.const_data_ptr(), f.rois.const_data_ptr(),
                                    f.output.mutable_data_ptr(), f.argmax.mutable_data_ptr<std::int32_t>(),
                                    cuda_stream(input)),
             kOp);
  return {f.output, f.argmax};
}
#endif

// The backward's contiguous inputs, the forward's shape and grad_input (uninitialised).
struct Backward {
  ScalarKind kind;
  kernels::RoiShape shape;
  Tensor grad, rois, argmax, grad_input;
};

Backward prepare_backward(const Tensor& grad, const Tensor& rois, const Tensor& argmax, double spatial_scale,
                          std::int64_t pooled_height, std::int64_t pooled_width, std::int64_t batch,
                          std::int64_t channels, std::int64_t height, std::int64_t width, DeviceType device) {
  check_rois(grad, rois, pooled_height, pooled_width, device, kBwd, "grad");
  check_same_device(grad, argmax, kBwd, "grad", "argmax");
  OPKILN_CHECK_VALUE(batch >= 0 && channels >= 0 && height >= 0 && width >= 0, "opkiln::", kBwd,
                     ": the input shape must be non-negative, got [", batch, ", ", channels, ", ", height, ", ",
                     width, "]");
  const kernels::RoiShape s{batch, channels, height, width, rois.size(0), pooled_height, pooled_width,
                                spatial_scale};
  const Sizes expected{pooled(s)};
  OPKILN_CHECK(sizes(grad) == expected, "opkiln::", kBwd, ": grad must have shape [K, C, pooled_height, "
               "pooled_width] = ", expected, ", got ", sizes(grad));
  OPKILN_CHECK(argmax.scalar_type() == ScalarType::Int && sizes(argmax) == expected, "opkiln::", kBwd,
               ": argmax must be int32 of grad's shape ", expected, ", got ", argmax.scalar_type(), " ",
               sizes(argmax));
  Backward b{float_kind(grad, kBwd, "grad"), s, as_contiguous(grad), as_contiguous(rois), as_contiguous(argmax),
             empty({batch, channels, height, width}, grad.scalar_type(), grad)};
  check_batch_index(b.rois, batch, kBwd);
  return b;
}

Tensor backward_cpu(const Tensor& grad, const Tensor& rois, const Tensor& argmax, double spatial_scale,
                             std::int64_t pooled_height, std::int64_t pooled_width, std::int64_t batch,
                             std::int64_t channels, std::int64_t height, std::int64_t width) {
  Backward b = prepare_backward(grad, rois, argmax, spatial_scale, pooled_height, pooled_width, batch, channels,
                                height, width, DeviceType::CPU);
  const void* pg = b.grad.const_data_ptr();
  const void* pr = b.rois.const_data_ptr();
  const auto* pa = static_cast<const std::int32_t*>(b.argmax.const_data_ptr());
  void* pgi = b.grad_input.mutable_data_ptr();
  parallel_for(0, batch * channels, std::max<std::int64_t>(1, 4096 / std::max<std::int64_t>(1, height * width)),
               [&](std::int64_t begin, std::int64_t end) {
                 kernels::roi_pool_backward_cpu(b.kind, b.shape, pg, pr, pa, pgi, begin, end);
               });
  return b.grad_input;
}

#if OPKILN_WITH_CUDA
Tensor backward_cuda(const Tensor& grad, const Tensor& rois, const Tensor& argmax, double spatial_scale,
                              std::int64_t pooled_height, std::int64_t pooled_width, std::int64_t batch,
                              std::int64_t channels, std::int64_t height, std::int64_t width) {
  const DeviceGuard guard(grad);
  Backward b = prepare_backward(grad, rois, argmax, spatial_scale, pooled_height, pooled_width, batch, channels,
                                height, width, DeviceType::CUDA);
  Workspace workspace(kernels::scatter_workspace_bytes(b.kind, b.grad_input.numel()), grad);
  check_cuda(kernels::roi_pool_backward_cuda(b.kind, b.shape, b.grad.const_data_ptr(), b.rois.const_data_ptr(),
                                             static_cast<const std::int32_t*>(b.argmax.const_data_ptr()),
                                             b.grad_input.mutable_data_ptr(), workspace.data(), workspace.bytes(),
                                             cuda_stream(grad)),
             kBwd);
  return b.grad_input;
}
#endif

// The schemas (torchvision's, int for SymInt), written once; a CPU and a CUDA kernel for each.
OPKILN_SCHEMAS(m) {
  m.def("roi_pool(Tensor input, Tensor rois, float spatial_scale, int pooled_height, int pooled_width) -> (Tensor, Tensor)");
  m.def("_roi_pool_backward(Tensor grad, Tensor rois, Tensor argmax, float spatial_scale, int pooled_height, "
        "int pooled_width, int batch, int channels, int height, int width) -> Tensor");
}
OPKILN_KERNELS(CPU, m) { m.impl("roi_pool", OPKILN_KERNEL(roi_pool_cpu)); m.impl("_roi_pool_backward", OPKILN_KERNEL(backward_cpu)); }
#if OPKILN_WITH_CUDA
OPKILN_KERNELS(CUDA, m) { m.impl("roi_pool", OPKILN_KERNEL(roi_pool_cuda)); m.impl("_roi_pool_backward", OPKILN_KERNEL(backward_cuda)); }
#endif

}  // namespace opkiln::roi_pool_binding
