// opkiln::deform_conv2d (torchvision's schema and argument order) and its internal backward
// opkiln::_deform_conv2d_backward -> (grad_input, grad_weight, grad_offset, grad_mask, grad_bias),
// for both ABI modes. The kernel core (deform_conv2d.h) samples and scatters; the matrix products
// go through torch (facade: matrix_product). Images go in blocks whose columns stay under
// kColumnsBudget elements. Fake impls and autograd: python/opkiln/ops.py.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <tuple>
#include <vector>

#include "deform_conv2d/deform_conv2d.h"
#include "facade/facade.h"

namespace opkiln::deform_conv2d_binding {
using namespace facade;
using kernels::DeformGeometry;

constexpr const char* kForward = "deform_conv2d";
constexpr const char* kBackward = "_deform_conv2d_backward";
// Elements of one block's columns (and of its gradient): 4 Mi, 16 MiB in float32 (a block of one
// detection-sized image keeps the matrix products large; more images stack up to it).
constexpr std::int64_t kColumnsBudget = std::int64_t{1} << 22;

struct Conv {
  DeformGeometry g;  // the whole batch
  std::int64_t groups, out_channels;
  ScalarKind kind;
};

Conv check(const Tensor& input, const Tensor& weight, const Tensor& offset, const Tensor& mask, const Tensor& bias,
           std::int64_t stride_h, std::int64_t stride_w, std::int64_t pad_h, std::int64_t pad_w,
           std::int64_t dilation_h, std::int64_t dilation_w, std::int64_t groups, std::int64_t offset_groups,
           bool use_mask, DeviceType device, const char* op) {
  const std::pair<const Tensor*, const char*> args[] = {
      {&input, "input"}, {&weight, "weight"}, {&offset, "offset"}, {&mask, "mask"}, {&bias, "bias"}};
  // Devices first, then shapes, then dtypes: torchvision's order (a shape error names the shape).
  for (const auto& [t, name] : args) check_same_device(input, *t, op, "input", name);
  check_device(input, device, op, "input");
  for (const auto& [t, name] : {args[0], args[1], args[2]}) {
    OPKILN_CHECK(t->dim() == 4, "opkiln::", op, ": ", name, " must have 4 dimensions, got ", sizes(*t));
  }
  OPKILN_CHECK(!use_mask || mask.dim() == 4, "opkiln::", op, ": mask must have 4 dimensions, got ", sizes(mask));
  OPKILN_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), "opkiln::", op, ": bias must have shape [",
               weight.size(0), "], got ", sizes(bias));
  DeformGeometry g;
  g.batch = input.size(0), g.channels = input.size(1), g.height = input.size(2), g.width = input.size(3);
  g.kernel_h = weight.size(2), g.kernel_w = weight.size(3);
  g.stride_h = stride_h, g.stride_w = stride_w, g.pad_h = pad_h, g.pad_w = pad_w;
  g.dilation_h = dilation_h, g.dilation_w = dilation_w, g.offset_groups = offset_groups, g.use_mask = use_mask;
  OPKILN_CHECK(g.kernel_h > 0 && g.kernel_w > 0, "opkiln::", op, ": weight_h: ", g.kernel_h,
               " weight_w: ", g.kernel_w, " (the kernel must not be empty)");
  OPKILN_CHECK(stride_h > 0 && stride_w > 0, "opkiln::", op, ": stride_h: ", stride_h, " stride_w: ", stride_w,
               " (strides must be positive)");
  OPKILN_CHECK(pad_h >= 0 && pad_w >= 0, "opkiln::", op, ": pad_h: ", pad_h, " pad_w: ", pad_w,
               " (padding must be >= 0)");
  OPKILN_CHECK(dilation_h > 0 && dilation_w > 0, "opkiln::", op, ": dilation_h: ", dilation_h,
               " dilation_w: ", dilation_w, " (dilations must be positive)");
  OPKILN_CHECK(groups > 0 && offset_groups > 0, "opkiln::", op, ": groups (", groups, ") and offset_groups (",
               offset_groups, ") must be positive");
  OPKILN_CHECK(weight.size(1) * groups == g.channels, "opkiln::", op, ": weight.shape[1] * groups (",
               weight.size(1), " * ", groups, ") must be the input's channels (", g.channels, ")");
  OPKILN_CHECK(weight.size(0) % groups == 0, "opkiln::", op, ": weight.shape[0] (", weight.size(0),
               ") must be a multiple of groups (", groups, ")");
  OPKILN_CHECK(offset.size(1) == offset_groups * 2 * g.taps(), "opkiln::", op,
               ": offset.shape[1] is not valid: got: ", offset.size(1), " expected: ", offset_groups * 2 * g.taps());
  OPKILN_CHECK(!use_mask || mask.size(1) == offset_groups * g.taps(), "opkiln::", op,
               ": mask.shape[1] is not valid: got: ", use_mask ? mask.size(1) : 0,
               " expected: ", offset_groups * g.taps());
  OPKILN_CHECK(g.channels % offset_groups == 0, "opkiln::", op, ": the input's channels (", g.channels,
               ") must be a multiple of offset_groups (", offset_groups, ")");
  OPKILN_CHECK(offset.size(0) == g.batch, "opkiln::", op, ": invalid batch size of offset: ", offset.size(0),
               " for an input of ", g.batch);
  OPKILN_CHECK(!use_mask || mask.size(0) == g.batch, "opkiln::", op, ": invalid batch size of mask: ",
               use_mask ? mask.size(0) : 0, " for an input of ", g.batch);
  g.out_h = (g.height + 2 * pad_h - (dilation_h * (g.kernel_h - 1) + 1)) / stride_h + 1;
  g.out_w = (g.width + 2 * pad_w - (dilation_w * (g.kernel_w - 1) + 1)) / stride_w + 1;
  OPKILN_CHECK(offset.size(2) == g.out_h && offset.size(3) == g.out_w, "opkiln::", op, ": offset output dims: (",
               offset.size(2), ", ", offset.size(3), ") - computed output dims: (", g.out_h, ", ", g.out_w, ")");
  OPKILN_CHECK(!use_mask || (mask.size(2) == g.out_h && mask.size(3) == g.out_w), "opkiln::", op,
               ": mask output dims: (", use_mask ? mask.size(2) : 0, ", ", use_mask ? mask.size(3) : 0,
               ") - computed output dims: (", g.out_h, ", ", g.out_w, ")");
  OPKILN_CHECK(g.out_h > 0 && g.out_w > 0, "opkiln::", op, ": Calculated output size too small - out_h: ", g.out_h,
               " out_w: ", g.out_w);
  for (const auto& [t, name] : args) check_same_dtype(input, *t, op, "input", name);
  return {g, groups, weight.size(0), float_kind(input, op, "input")};
}

// The pointer `items` elements of t's dtype past p (a block's first image).
const void* offset_by(const void* p, std::int64_t items, const Tensor& t) {
  return static_cast<const char*>(p) + items * static_cast<std::int64_t>(t.element_size());
}
void* offset_by(void* p, std::int64_t items, const Tensor& t) {
  return static_cast<char*>(p) + items * static_cast<std::int64_t>(t.element_size());
}

// One block of images [b0, b0 + nb): its geometry and where its images start.
struct Block {
  DeformGeometry g;
  std::int64_t b0;
};

std::vector<Block> blocks(const DeformGeometry& g) {
  const std::int64_t per_image = std::max<std::int64_t>(1, g.channels * g.taps() * g.positions());
  const std::int64_t size = std::clamp<std::int64_t>(kColumnsBudget / per_image, 1, std::max<std::int64_t>(1, g.batch));
  std::vector<Block> out;
  for (std::int64_t b0 = 0; b0 < g.batch; b0 += size) {
    Block b{g, b0};
    b.g.batch = std::min(size, g.batch - b0);
    out.push_back(b);
  }
  return out;
}

// The block's inputs: input, offset and mask pointers at its first image.
struct BlockInputs {
  const void *input, *offset, *mask;
};

BlockInputs block_inputs(const Tensor& input, const Tensor& offset, const Tensor& mask, const Block& b) {
  const DeformGeometry& g = b.g;
  return {offset_by(input.const_data_ptr(), b.b0 * g.channels * g.plane(), input),
          offset_by(offset.const_data_ptr(), b.b0 * 2 * g.offset_groups * g.taps() * g.positions(), offset),
          g.use_mask ? offset_by(mask.const_data_ptr(), b.b0 * g.offset_groups * g.taps() * g.positions(), mask) : nullptr};
}

// The sample table and the columns [nb, groups, K, positions] of a block.
Tensor sample_and_im2col(const Conv& c, const Block& b, const BlockInputs& in, Workspace& table, const Tensor& like,
                         DeviceType device, const char* op) {
  const DeformGeometry& g = b.g;
  const std::int64_t k = g.channels / c.groups * g.taps();
  Tensor columns = empty({g.batch, c.groups, k, g.positions()}, like.scalar_type(), like);
#if OPKILN_WITH_CUDA
  if (device == DeviceType::CUDA) {
    const CudaStream stream = cuda_stream(like);
    check_cuda(kernels::deform_samples_cuda(c.kind, in.offset, in.mask, g, table.data(), stream), op);
    check_cuda(kernels::deform_im2col_cuda(c.kind, in.input, table.data(), g, columns.mutable_data_ptr(), stream), op);
    return columns;
  }
#else
  static_cast<void>(device), static_cast<void>(op);
#endif
  parallel_for(0, g.sample_rows(), 1, [&](std::int64_t lo, std::int64_t hi) {
    kernels::deform_samples_cpu(c.kind, in.offset, in.mask, g, table.data(), lo, hi);
  });
  void* cols = columns.mutable_data_ptr();
  parallel_for(0, g.batch * g.channels, 1, [&](std::int64_t lo, std::int64_t hi) {
    kernels::deform_im2col_cpu(c.kind, in.input, table.data(), g, cols, lo, hi);
  });
  return columns;
}

template <DeviceType D>
Tensor forward(const Tensor& input, const Tensor& weight, const Tensor& offset, const Tensor& mask,
               const Tensor& bias, std::int64_t stride_h, std::int64_t stride_w, std::int64_t pad_h,
               std::int64_t pad_w, std::int64_t dilation_h, std::int64_t dilation_w, std::int64_t groups,
               std::int64_t offset_groups, bool use_mask) {
  const Conv c = check(input, weight, offset, mask, bias, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w,
                       groups, offset_groups, use_mask, D, kForward);
  const DeformGeometry& g = c.g;
#if OPKILN_WITH_CUDA
  std::optional<DeviceGuard> guard;
  if (D == DeviceType::CUDA) guard.emplace(input);
#endif
  const std::vector<std::int64_t> shape{g.batch, c.out_channels, g.out_h, g.out_w};
  if (g.batch == 0) return zeros(shape, input.scalar_type(), input);
  const Tensor x = as_contiguous(input), off = as_contiguous(offset), m = as_contiguous(mask);
  const Tensor b = as_contiguous(bias);
  const Tensor w = reshaped(as_contiguous(weight), {c.groups, c.out_channels / c.groups, g.channels / c.groups * g.taps()});
  Tensor output = empty(shape, input.scalar_type(), input);
  for (const Block& blk : blocks(g)) {
    Workspace table(kernels::deform::sample_table_bytes(c.kind, blk.g), input);
    const Tensor columns = sample_and_im2col(c, blk, block_inputs(x, off, m, blk), table, input, D, kForward);
    const Tensor product = as_contiguous(matrix_product(w, columns));  // [nb, groups, C_out / groups, positions]
    void* out = offset_by(output.mutable_data_ptr(), blk.b0 * c.out_channels * g.positions(), output);
    const std::int64_t planes = blk.g.batch * c.out_channels;
#if OPKILN_WITH_CUDA
    if (D == DeviceType::CUDA) {
      check_cuda(kernels::deform_add_bias_cuda(c.kind, product.const_data_ptr(), b.const_data_ptr(), c.out_channels,
                                               g.positions(), planes * g.positions(), out, cuda_stream(input)),
                 kForward);
      continue;
    }
#endif
    parallel_for(0, planes, std::max<std::int64_t>(1, 4096 / g.positions()), [&](std::int64_t lo, std::int64_t hi) {
      kernels::deform_add_bias_cpu(c.kind, product.const_data_ptr(), b.const_data_ptr(), c.out_channels,
                                   g.positions(), out, lo, hi);
    });
  }
  return output;
}

template <DeviceType D>
std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> backward(
    const Tensor& grad, const Tensor& input, const Tensor& weight, const Tensor& offset, const Tensor& mask,
    const Tensor& bias, std::int64_t stride_h, std::int64_t stride_w, std::int64_t pad_h, std::int64_t pad_w,
    std::int64_t dilation_h, std::int64_t dilation_w, std::int64_t groups, std::int64_t offset_groups, bool use_mask) {
  const Conv c = check(input, weight, offset, mask, bias, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w,
                       groups, offset_groups, use_mask, D, kBackward);
  const DeformGeometry& g = c.g;
  check_same_device(input, grad, kBackward, "input", "grad");
  check_same_dtype(input, grad, kBackward, "input", "grad");
  const std::vector<std::int64_t> out_shape{g.batch, c.out_channels, g.out_h, g.out_w};
  OPKILN_CHECK(sizes(grad) == Sizes{out_shape}, "opkiln::", kBackward, ": grad must have shape ", Sizes{out_shape},
               ", got ", sizes(grad));
#if OPKILN_WITH_CUDA
  std::optional<DeviceGuard> guard;
  if (D == DeviceType::CUDA) guard.emplace(input);
#endif
  const ScalarType dtype = input.scalar_type();
  Tensor grad_input = empty(sizes(input).values, dtype, input);
  Tensor grad_offset = empty(sizes(offset).values, dtype, input);
  Tensor grad_mask = use_mask ? empty(sizes(mask).values, dtype, input) : zeros(sizes(mask).values, dtype, input);
  Tensor grad_weight = zeros(sizes(weight).values, dtype, input);
  Tensor grad_bias = zeros(sizes(bias).values, dtype, input);
  if (g.batch == 0) {
    return {zeros(sizes(input).values, dtype, input), grad_weight, zeros(sizes(offset).values, dtype, input),
            zeros(sizes(mask).values, dtype, input), grad_bias};
  }
  const Tensor x = as_contiguous(input), off = as_contiguous(offset), m = as_contiguous(mask);
  const Tensor gc = as_contiguous(grad);
  const std::int64_t per_group_out = c.out_channels / c.groups, k = g.channels / c.groups * g.taps();
  const Tensor w = reshaped(as_contiguous(weight), {c.groups, per_group_out, k});
  const Tensor w_t = transposed(w, 1, 2);
  for (const Block& blk : blocks(g)) {
    const DeformGeometry& bg = blk.g;
    const BlockInputs in = block_inputs(x, off, m, blk);
    const Tensor go = reshaped(bg.batch == g.batch ? gc : narrowed_copy(gc, 0, blk.b0, bg.batch),
                               {bg.batch, c.groups, per_group_out, g.positions()});
    const Tensor grad_columns = as_contiguous(matrix_product(w_t, go));  // [nb, groups, K, positions]
    Workspace table(kernels::deform::sample_table_bytes(c.kind, bg), input);
    const Tensor columns = sample_and_im2col(c, blk, in, table, input, D, kBackward);
    const Tensor gw = as_contiguous(matrix_product(go, transposed(columns, 2, 3)));  // [nb, groups, per_group_out, K]
    void* gi = offset_by(grad_input.mutable_data_ptr(), blk.b0 * g.channels * g.plane(), grad_input);
    void* goff = offset_by(grad_offset.mutable_data_ptr(), blk.b0 * 2 * g.offset_groups * g.taps() * g.positions(), grad_offset);
    void* gm = use_mask ? offset_by(grad_mask.mutable_data_ptr(), blk.b0 * g.offset_groups * g.taps() * g.positions(), grad_mask)
                        : nullptr;
    const bool accumulate = blk.b0 > 0;
#if OPKILN_WITH_CUDA
    if (D == DeviceType::CUDA) {
      const CudaStream stream = cuda_stream(input);
      Workspace scatter(kernels::scatter_workspace_bytes(c.kind, bg.batch * g.channels * g.plane()), input);
      check_cuda(kernels::deform_col2im_cuda(c.kind, grad_columns.const_data_ptr(), table.data(), bg, gi,
                                             scatter.data(), scatter.bytes(), stream), kBackward);
      check_cuda(kernels::deform_offset_grad_cuda(c.kind, grad_columns.const_data_ptr(), in.input, in.offset, in.mask,
                                                  bg, goff, gm, stream), kBackward);
      check_cuda(kernels::deform_sum_cuda(c.kind, gw.const_data_ptr(), bg.batch, grad_weight.numel(), accumulate,
                                          grad_weight.mutable_data_ptr(), stream), kBackward);
      continue;
    }
#endif
    parallel_for(0, bg.batch * g.channels, 1, [&](std::int64_t lo, std::int64_t hi) {
      kernels::deform_col2im_cpu(c.kind, grad_columns.const_data_ptr(), table.data(), bg, gi, lo, hi);
    });
    parallel_for(0, bg.sample_rows(), 1, [&](std::int64_t lo, std::int64_t hi) {
      kernels::deform_offset_grad_cpu(c.kind, grad_columns.const_data_ptr(), in.input, in.offset, in.mask, bg, goff,
                                      gm, lo, hi);
    });
    void* gwp = grad_weight.mutable_data_ptr();
    parallel_for(0, grad_weight.numel(), 4096, [&](std::int64_t lo, std::int64_t hi) {
      kernels::deform_sum_cpu(c.kind, gw.const_data_ptr(), bg.batch, grad_weight.numel(), accumulate, gwp, lo, hi);
    });
  }
#if OPKILN_WITH_CUDA
  if (D == DeviceType::CUDA) {
    check_cuda(kernels::deform_bias_grad_cuda(c.kind, gc.const_data_ptr(), g.batch, c.out_channels, g.positions(),
                                              false, grad_bias.mutable_data_ptr(), cuda_stream(input)),
               kBackward);
    return {grad_input, grad_weight, grad_offset, grad_mask, grad_bias};
  }
#endif
  void* gb = grad_bias.mutable_data_ptr();
  parallel_for(0, c.out_channels, 1, [&](std::int64_t lo, std::int64_t hi) {
    kernels::deform_bias_grad_cpu(c.kind, gc.const_data_ptr(), g.batch, c.out_channels, g.positions(), false, gb, lo,
                                  hi);
  });
  return {grad_input, grad_weight, grad_offset, grad_mask, grad_bias};
}

OPKILN_SCHEMAS(m) {
  m.def("deform_conv2d(Tensor input, Tensor weight, Tensor offset, Tensor mask, Tensor bias, int stride_h, "
        "int stride_w, int pad_h, int pad_w, int dilation_h, int dilation_w, int groups, int offset_groups, "
        "bool use_mask) -> Tensor");
  m.def("_deform_conv2d_backward(Tensor grad, Tensor input, Tensor weight, Tensor offset, Tensor mask, "
        "Tensor bias, int stride_h, int stride_w, int pad_h, int pad_w, int dilation_h, int dilation_w, "
        "int groups, int offset_groups, bool use_mask) -> (Tensor, Tensor, Tensor, Tensor, Tensor)");
}

OPKILN_KERNELS(CPU, m) {
  m.impl(kForward, OPKILN_KERNEL(forward<DeviceType::CPU>));
  m.impl(kBackward, OPKILN_KERNEL(backward<DeviceType::CPU>));
}
#if OPKILN_WITH_CUDA
OPKILN_KERNELS(CUDA, m) {
  m.impl(kForward, OPKILN_KERNEL(forward<DeviceType::CUDA>));
  m.impl(kBackward, OPKILN_KERNEL(backward<DeviceType::CUDA>));
}
#endif

}  // namespace opkiln::deform_conv2d_binding
