// Deformable convolution (DCN v1, and v2 with a mask) with torchvision.ops.deform_conv2d's semantics:
//   input [N, C, H, W], weight [C_out, C / groups, KH, KW], offset [N, 2 * OG * KH * KW, OH, OW],
//   mask [N, OG * KH * KW, OH, OW] (or none: 1), bias [C_out];
//   OH = (H + 2 * pad_h - (dilation_h * (KH - 1) + 1)) / stride_h + 1 (OW likewise).
// Input channel c belongs to offset group c / (C / OG). For output position p = (oh, ow) and kernel
// tap t = (i, j) of offset group og:
//   y = oh * stride_h - pad_h + i * dilation_h + offset[n, 2 * (og * KH * KW + t), oh, ow]
//   x = ow * stride_w - pad_w + j * dilation_w + offset[n, 2 * (og * KH * KW + t) + 1, oh, ow]
//   columns[n, c, t, p] = mask[n, og * KH * KW + t, oh, ow] * bilinear(input[n, c], y, x)
// with common/bilinear.h's zero-padded rule, and output[n] = weight (per group) x columns[n] + bias:
// the binding does the matrix products through torch; this core samples (im2col), scatters the
// columns' gradient back to the input (col2im) and takes the offset's and mask's gradients (the
// slope of each sample times the columns' gradient, summed over the offset group's channels).
//
// Arithmetic is float32 for float32/float16/bfloat16 data and float64 for float64; columns have the
// input's dtype. A block of `batch` images at a time: every pointer below is the block's first image.
//
// Errors the binding raises (RuntimeError in both builds; tests/ops/test_deform_conv2d.py):
//   "opkiln::deform_conv2d: <arg> must have 4 dimensions, got [...]", "offset.shape[1] is not valid",
//   "mask.shape[1] is not valid", "Calculated output size too small", dtype and device mismatches.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/bilinear.h"
#include "common/common.h"
#include "common/host_device.h"

namespace opkiln::kernels {

struct DeformGeometry {
  std::int64_t batch = 0, channels = 0, height = 0, width = 0;
  std::int64_t kernel_h = 0, kernel_w = 0, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  std::int64_t dilation_h = 1, dilation_w = 1, out_h = 0, out_w = 0, offset_groups = 1;
  bool use_mask = false;

  OPKILN_HD std::int64_t taps() const { return kernel_h * kernel_w; }
  OPKILN_HD std::int64_t positions() const { return out_h * out_w; }
  OPKILN_HD std::int64_t plane() const { return height * width; }
  OPKILN_HD std::int64_t group_channels() const { return channels / offset_groups; }
  // Rows of the sample table: one per (image, offset group, tap), positions() samples each.
  OPKILN_HD std::int64_t sample_rows() const { return batch * offset_groups * taps(); }
};

namespace deform {

// Where tap t of sample row r samples at position p, and its mask. offset/mask: the block's.
template <typename Acc>
struct Point {
  Acc y, x, mask;
};

template <typename Acc, typename T, typename Load>
OPKILN_HD Point<Acc> point(const DeformGeometry& g, const T* offset, const T* mask, std::int64_t row,
                                    std::int64_t p, Load&& load) {
  const std::int64_t t = row % g.taps();
  const std::int64_t n_og = row / g.taps();  // n * OG + og
  const std::int64_t n = n_og / g.offset_groups;
  const std::int64_t og = n_og % g.offset_groups;
  const std::int64_t oh = p / g.out_w, ow = p % g.out_w;
  const T* off = offset + (n * 2 * g.offset_groups * g.taps() + 2 * (og * g.taps() + t)) * g.positions() + p;
  Point<Acc> pt;
  pt.y = static_cast<Acc>(oh * g.stride_h - g.pad_h + (t / g.kernel_w) * g.dilation_h) + load(off[0]);
  pt.x = static_cast<Acc>(ow * g.stride_w - g.pad_w + (t % g.kernel_w) * g.dilation_w) + load(off[g.positions()]);
  pt.mask = g.use_mask ? load(mask[(n * g.offset_groups * g.taps() + og * g.taps() + t) * g.positions() + p]) : Acc(1);
  return pt;
}

// The sample of tap row r at position p, its weights scaled by the mask: what im2col reads and
// col2im scatters.
template <typename Acc>
OPKILN_HD bilinear::Sample<Acc> masked(bilinear::Sample<Acc> s, Acc mask) {
  s.w1 *= mask;
  s.w2 *= mask;
  s.w3 *= mask;
  s.w4 *= mask;
  return s;
}

// Bytes of the sample table (sample_rows() * positions() samples) for `kind`.
inline std::size_t sample_table_bytes(ScalarKind kind, const DeformGeometry& g) {
  const std::size_t n = static_cast<std::size_t>(g.sample_rows() * g.positions());
  return n * (kind == ScalarKind::Float64 ? sizeof(bilinear::Sample<double>) : sizeof(bilinear::Sample<float>));
}

}  // namespace deform

// CPU entry points. [begin, end): the range of work items each takes (the binding splits it
// over threads; a range writes only its own items).
// samples: rows [begin, end) of the sample table (rows: sample_rows()).
void deform_samples_cpu(ScalarKind kind, const void* offset, const void* mask, const DeformGeometry& g, void* table,
                        std::int64_t begin, std::int64_t end);
// im2col: (image, channel) pairs [begin, end) of columns [batch, C, KH * KW, OH * OW].
void deform_im2col_cpu(ScalarKind kind, const void* input, const void* table, const DeformGeometry& g, void* columns,
                       std::int64_t begin, std::int64_t end);
// col2im: (image, channel) planes [begin, end) of grad_input, overwritten.
void deform_col2im_cpu(ScalarKind kind, const void* grad_columns, const void* table, const DeformGeometry& g,
                       void* grad_input, std::int64_t begin, std::int64_t end);
// The offset's and mask's gradients: sample rows [begin, end), overwritten (grad_mask only with use_mask).
void deform_offset_grad_cpu(ScalarKind kind, const void* grad_columns, const void* input, const void* offset,
                            const void* mask, const DeformGeometry& g, void* grad_offset, void* grad_mask,
                            std::int64_t begin, std::int64_t end);
// out[i] = src[i] + bias[(i / plane) % channels] (bias may be null) over planes [begin, end).
void deform_add_bias_cpu(ScalarKind kind, const void* src, const void* bias, std::int64_t channels,
                         std::int64_t plane, void* out, std::int64_t begin, std::int64_t end);
// dst[j] (+)= sum over i < count of src[i * n + j], for j in [begin, end); accumulate: add to dst.
void deform_sum_cpu(ScalarKind kind, const void* src, std::int64_t count, std::int64_t n, bool accumulate, void* dst,
                    std::int64_t begin, std::int64_t end);
// grad_bias[c] (+)= the sum of grad [batch, channels, plane] over images and plane, c in [begin, end).
void deform_bias_grad_cpu(ScalarKind kind, const void* grad, std::int64_t batch, std::int64_t channels,
                          std::int64_t plane, bool accumulate, void* grad_bias, std::int64_t begin, std::int64_t end);

#if OPKILN_WITH_CUDA
// The same on the GPU, whole blocks at once, queued on `stream`; grad_input through the scatter
// workspace (common/cuda_scatter.cuh).
CudaStatus deform_samples_cuda(ScalarKind kind, const void* offset, const void* mask, const DeformGeometry& g,
                               void* table, CudaStream stream);
CudaStatus deform_im2col_cuda(ScalarKind kind, const void* input, const void* table, const DeformGeometry& g,
                              void* columns, CudaStream stream);
CudaStatus deform_col2im_cuda(ScalarKind kind, const void* grad_columns, const void* table, const DeformGeometry& g,
                              void* grad_input, void* workspace, std::size_t workspace_bytes, CudaStream stream);
CudaStatus deform_offset_grad_cuda(ScalarKind kind, const void* grad_columns, const void* input, const void* offset,
                                   const void* mask, const DeformGeometry& g, void* grad_offset, void* grad_mask,
                                   CudaStream stream);
CudaStatus deform_add_bias_cuda(ScalarKind kind, const void* src, const void* bias, std::int64_t channels,
                                std::int64_t plane, std::int64_t numel, void* out, CudaStream stream);
CudaStatus deform_sum_cuda(ScalarKind kind, const void* src, std::int64_t count, std::int64_t n, bool accumulate,
                           void* dst, CudaStream stream);
CudaStatus deform_bias_grad_cuda(ScalarKind kind, const void* grad, std::int64_t batch, std::int64_t channels,
                                 std::int64_t plane, bool accumulate, void* grad_bias, CudaStream stream);
#endif

}  // namespace opkiln::kernels
