// The position-sensitive RoI ops (ps_roi_align, ps_roi_pool): what they share, written once.
//
// Shapes: features [N, C, H, W] with C = channels_out * PH * PW; rois [K, 5] (common/roi.h);
// output and channel_mapping [K, channels_out, PH, PW]. Output element (k, c_out, ph, pw) reads
// input channel c_in = (c_out * PH + ph) * PW + pw only, and channel_mapping holds that c_in
// (int32, as torchvision's). So every input plane (b, c_in) receives gradient from exactly one
// bin (c_out, ph, pw) of the rois of batch b: the CPU backward owns whole planes (no atomics,
// deterministic), the CUDA backward scatters with atomicAdd (common/cuda_scatter.cuh).
//
// A member op writes only its per-bin math, an `Op` type (host/device, ops/<op>/<op>.h):
//   template <typename Acc> struct Roi : PsRoiBase { ... };
//   template <typename Acc> static Roi<Acc> roi(Acc b, Acc x1, Acc y1, Acc x2, Acc y2, const PsRoiGeometry&);
//   template <typename Acc, typename Load>
//   static Acc forward(const Roi<Acc>&, std::int64_t ph, std::int64_t pw, const PsRoiGeometry&, Load load);
//     (load(offset): the input plane's value at offset, as Acc)
//   template <typename Acc, typename Add>
//   static void backward(const Roi<Acc>&, Acc grad, std::int64_t ph, std::int64_t pw, const PsRoiGeometry&, Add add);
//     (add(offset, value): adds into the grad_input plane)
//   optional, CPU only (common/ps_roi_cpu.h): template <int G, typename Acc, typename Load>
//   static std::array<Acc, G> forward_planes(const Roi<Acc>&, ph, pw, const PsRoiGeometry&, Load load);
//   template <int G, typename Acc, typename Add> static void backward_planes(const Roi<Acc>&,
//       const std::array<Acc, G>& grad, ph, pw, const PsRoiGeometry&, Add add);
//     (load(i, offset), add(i, offset, value): plane i of G planes sharing bin (ph, pw); each plane's
//     result as forward/backward give it alone: the bin's geometry is computed once for all G)
// and instantiates the drivers below for it: OPKILN_PS_ROI_CPU(Op) in its .cpp file,
// OPKILN_PS_ROI_CUDA(Op) in its .cu file (common/ps_roi_cpu.h, common/ps_roi_cuda.cuh). The
// binding's prologue (checks, contiguity, batch-index check, allocation, dispatch) is
// facade/ps_roi.h. Arithmetic is float32 for float32/float16/bfloat16, float64 for float64.
// A roi whose batch index is out of range gives 0 and no gradient (the binding rejects it first).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/common.h"
#include "common/host_device.h"
#include "common/roi.h"

namespace opkiln::kernels {

struct PsRoiGeometry : RoiShape {  // RoiShape::channels is the input's C
  std::int64_t channels_out = 0;
  std::int64_t sampling_ratio = -1;  // ps_roi_align's; ignored by ps_roi_pool
};

// What an op's Roi<Acc> derives from: whether the roi reads anything (its batch index is in range)
// and which image it reads. claim(b, g): sets both from the roi's batch value; returns valid.
struct PsRoiBase {
  bool valid = false;
  std::int64_t batch = 0;

  template <typename Acc>
  OPKILN_HD bool claim(Acc b, const PsRoiGeometry& g) {
    valid = batch_index_valid(b, g.batch);
    batch = valid ? static_cast<std::int64_t>(b) : 0;
    return valid;
  }
};

// The input channel output channel c_out reads at bin (ph, pw).
OPKILN_HD std::int64_t ps_input_channel(std::int64_t c_out, std::int64_t ph, std::int64_t pw,
                                        const PsRoiGeometry& g) {
  return (c_out * g.pooled_height + ph) * g.pooled_width + pw;
}

// Output planes [begin, end) of the K * channels_out planes (k * channels_out + c_out).
template <typename Op>
void ps_roi_forward_cpu(ScalarKind kind, const PsRoiGeometry& g, const void* input, const void* rois, void* output,
                        std::int32_t* channel_mapping, std::int64_t begin, std::int64_t end);

// grad_input planes [begin, end) of the N * C planes (b * C + c), each OVERWRITTEN by the
// thread that owns its range (grad_input may come uninitialised).
template <typename Op>
void ps_roi_backward_cpu(ScalarKind kind, const PsRoiGeometry& g, const void* grad_output, const void* rois,
                         void* grad_input, std::int64_t begin, std::int64_t end);

// One thread per output element; no host synchronisation.
template <typename Op>
CudaStatus ps_roi_forward_cuda(ScalarKind kind, const PsRoiGeometry& g, const void* input, const void* rois,
                               void* output, std::int32_t* channel_mapping, CudaStream stream);

// Workspace: scatter_workspace_bytes(kind, N * C * H * W) (common/common.h); zeroes grad_input itself.
template <typename Op>
CudaStatus ps_roi_backward_cuda(ScalarKind kind, const PsRoiGeometry& g, const void* grad_output, const void* rois,
                                void* grad_input, void* workspace, std::size_t workspace_bytes, CudaStream stream);

}  // namespace opkiln::kernels
