// The (non-position-sensitive) RoI ops, roi_align and roi_pool: what they share, written once.
//
// Shapes: features [N, C, H, W]; rois [K, 5] (common/roi.h) or the op's own box layout (below:
// kBoxColumns); output [K, C, PH, PW], and for an
// op that saves an index per output element (kIndex: roi_pool's argmax) an int32 tensor of that
// shape. Output element (k, c, ph, pw) reads input plane (b, c) only, b the roi's batch index.
//
// A member op writes only its per-bin math, an `Op` type (host/device, ops/<op>/<op>.h):
//   static constexpr bool kIndex;   the forward writes an int32 index per element (-1: none) and
//                                   the backward adds grad there (the family does it, no taps)
//   template <typename Acc> struct Roi { bool valid; std::int64_t batch; ... };
//   template <typename Acc, typename Round>
//   static Roi<Acc> roi(Acc b, Acc x1, Acc y1, Acc x2, Acc y2, const RoiFamilyGeometry&, Round round);
//     (round(v): v rounded to the storage dtype and back, for ops that compute in it as torchvision;
//     how a box is read: the row's values in column order, then the geometry and round)
//   optional, the box layout when it is not torchvision's (batch index, x1, y1, x2, y2):
//   static constexpr std::int64_t kBoxColumns;  the values of a roi row (column 0: the batch index),
//                                               all passed to roi() (e.g. 6: b, cx, cy, w, h, angle)
//   static constexpr std::string_view kBoxLayout;  their names, for the binding's shape message
//   optional, the op's own parameters beyond the family's (e.g. a `clockwise` flag):
//   struct Params { bool clockwise = false; };  (trivially copyable: it travels to the device by value)
//     the drivers then pass a RoiFamilyGeometryWith<Params> (g.params) wherever a geometry goes, and
//     the binding passes the values to roi_family_forward/backward (facade/roi_family.h)
//   template <typename Acc> struct Tap;        one read of a bin (a bilinear sample, a window)
//   template <typename Acc, typename Round, typename F>
//   static void taps(const Roi<Acc>&, std::int64_t ph, std::int64_t pw, const RoiFamilyGeometry&, Round, F f);
//     (f(tap) for each tap of bin (ph, pw), in the order the op's sum/fold takes them)
//   template <typename Acc> struct State;      the fold over a bin's taps
//   static State<Acc> start(const Roi<Acc>&);
//   static void fold(State<Acc>&, const Tap<Acc>&, Load load);   (load(offset): the plane's value)
//   static RoiValue<Acc> finish(const Roi<Acc>&, const State<Acc>&);
//   optional, CPU forward only (common/roi_family_cpu.h): static constexpr int kPlanes (channel
//   planes folded side by side, default 4) and
//   template <int G, typename Acc, typename Load>
//   static void fold_planes(std::array<State<Acc>, G>&, const Tap<Acc>&, Load);
//     (load(i, offset): plane i's value; each plane's state as fold gives it alone)
//   kIndex == false only (the backward through the taps):
//   static Acc grad(const Roi<Acc>&, Acc grad_output);          (the bin's gradient)
//   static void scatter(const Tap<Acc>&, Acc grad, Add add);    (add(offset, value) into the plane)
// and instantiates the drivers for it: OPKILN_ROI_FAMILY_CPU(Op) in its .cpp file,
// OPKILN_ROI_FAMILY_CUDA(Op) in its .cu file (common/roi_family_cpu.h, roi_family_cuda.cuh). The
// binding's prologue (checks, contiguity, batch-index check, allocation, workspace, dispatch) is
// facade/roi_family.h.
//
// What the drivers guarantee (so an op's results do not depend on the split or the device
// layout): every output element is finish(fold(start, taps in order)); an invalid roi (batch
// index out of range) gives value 0, index -1 and no gradient. The CPU backward owns whole
// grad_input planes and adds, per plane, in the order (roi, bin, tap) (deterministic, no
// atomics; float16/bfloat16 in a float32 scratch, rounded once); the CUDA backward scatters with
// atomicAdd (common/cuda_scatter.cuh). Arithmetic is float32 for float32/float16/bfloat16,
// float64 for float64.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "common/common.h"
#include "common/host_device.h"
#include "common/roi.h"

namespace opkiln::kernels {

struct RoiFamilyGeometry : RoiShape {
  std::int64_t sampling_ratio = -1;  // roi_align's (<= 0: adaptive); ignored by roi_pool
  bool aligned = false;              // roi_align's
};

// The geometry with an op's own parameters (Op::Params), and the geometry the drivers pass an op:
// RoiGeometry<Op> (RoiFamilyGeometry for an op without Params).
template <typename Params>
struct RoiFamilyGeometryWith : RoiFamilyGeometry {
  Params params{};
};

struct RoiNoParams {};

template <typename Op>
struct RoiParamsOf {
  using type = RoiNoParams;
};

template <typename Op>
  requires requires { typename Op::Params; }
struct RoiParamsOf<Op> {
  using type = typename Op::Params;
};

template <typename Op>
using RoiParams = typename RoiParamsOf<Op>::type;

template <typename Op>
using RoiGeometry = std::conditional_t<std::is_same_v<RoiParams<Op>, RoiNoParams>, RoiFamilyGeometry,
                                       RoiFamilyGeometryWith<RoiParams<Op>>>;

// The columns of a roi row of op Op (Op::kBoxColumns, else torchvision's 5) and their names.
template <typename Op>
constexpr std::int64_t kBoxColumns = [] {
  if constexpr (requires { Op::kBoxColumns; }) {
    static_assert(Op::kBoxColumns >= 1, "a roi row's column 0 is its batch index");
    return std::int64_t{Op::kBoxColumns};
  } else {
    return kRoiColumns;
  }
}();

template <typename Op>
constexpr std::string_view kBoxLayout = [] {
  if constexpr (requires { Op::kBoxLayout; }) {
    return std::string_view{Op::kBoxLayout};
  } else {
    return std::string_view{"batch index, x1, y1, x2, y2"};
  }
}();

// What finish() gives for one output element: its value and (kIndex ops) its index.
template <typename Acc>
struct RoiValue {
  Acc value;
  std::int32_t index;
};

// Output planes [begin, end) of the K * C planes (k * C + c); index: nullptr unless Op::kIndex.
template <typename Op>
void roi_family_forward_cpu(ScalarKind kind, const RoiGeometry<Op>& g, const void* input, const void* rois,
                            void* output, std::int32_t* index, std::int64_t begin, std::int64_t end);

// grad_input planes [begin, end) of the N * C planes (b * C + c), each OVERWRITTEN by the thread
// that owns its range (grad_input may come uninitialised). index: the forward's (Op::kIndex).
template <typename Op>
void roi_family_backward_cpu(ScalarKind kind, const RoiGeometry<Op>& g, const void* grad_output, const void* rois,
                             const std::int32_t* index, void* grad_input, std::int64_t begin, std::int64_t end);

// One thread per output element; no host synchronisation.
template <typename Op>
CudaStatus roi_family_forward_cuda(ScalarKind kind, const RoiGeometry<Op>& g, const void* input, const void* rois,
                                   void* output, std::int32_t* index, CudaStream stream);

// Workspace: scatter_workspace_bytes(kind, N * C * H * W) (common/common.h); zeroes grad_input itself.
template <typename Op>
CudaStatus roi_family_backward_cuda(ScalarKind kind, const RoiGeometry<Op>& g, const void* grad_output,
                                    const void* rois, const std::int32_t* index, void* grad_input, void* workspace,
                                    std::size_t workspace_bytes, CudaStream stream);

}  // namespace opkiln::kernels
