// The CPU drivers of the position-sensitive RoI ops (common/ps_roi.h): the loops over rois,
// channels and bins, and the plane ownership of the backward. Include it in the op's CPU
// source and instantiate with OPKILN_PS_ROI_CPU(Op).
#pragma once

#include <vector>

#include "common/cpu_planes.h"
#include "common/half_float.h"
#include "common/ps_roi.h"

namespace opkiln::kernels::ps_roi_cpu {

template <typename Op, typename T, typename Acc>
typename Op::template Roi<Acc> load_roi(const T* rois, std::int64_t k, const PsRoiGeometry& g) {
  using C = cpu::Convert<T>;
  const T* r = rois + k * kRoiColumns;
  return Op::template roi<Acc>(C::load(r[0]), C::load(r[1]), C::load(r[2]), C::load(r[3]), C::load(r[4]), g);
}

}  // namespace opkiln::kernels::ps_roi_cpu

namespace opkiln::kernels {

template <typename Op>
void ps_roi_forward_cpu(ScalarKind kind, const PsRoiGeometry& g, const void* input, const void* rois, void* output,
                        std::int32_t* channel_mapping, std::int64_t begin, std::int64_t end) {
  if (begin >= end || g.channels_out <= 0) return;
  cpu::dispatch_float_kinds(static_cast<int>(kind), [&]<typename T>() {
    using C = cpu::Convert<T>;
    using Acc = decltype(C::load(T{}));
    const T* in = static_cast<const T*>(input);
    T* out = static_cast<T*>(output);
    const std::int64_t plane = g.height * g.width;
    cpu::for_each_row_span(begin, end, g.channels_out, [&](std::int64_t k, std::int64_t c_begin, std::int64_t c_end) {
      const auto roi = ps_roi_cpu::load_roi<Op, T, Acc>(static_cast<const T*>(rois), k, g);
      std::int64_t at = (k * g.channels_out + c_begin) * g.pooled_height * g.pooled_width;
      for (std::int64_t c_out = c_begin; c_out < c_end; ++c_out) {
        for (std::int64_t ph = 0; ph < g.pooled_height; ++ph) {
          for (std::int64_t pw = 0; pw < g.pooled_width; ++pw, ++at) {
            const std::int64_t c_in = ps_input_channel(c_out, ph, pw, g);
            Acc v = 0;
            if (roi.valid) {
              const T* p = in + (roi.batch * g.channels + c_in) * plane;
              v = Op::forward(roi, ph, pw, g, [p](std::int64_t o) { return C::load(p[o]); });
            }
            out[at] = C::store(v);
            channel_mapping[at] = static_cast<std::int32_t>(c_in);
          }
        }
      }
    });
  });
}

template <typename Op>
void ps_roi_backward_cpu(ScalarKind kind, const PsRoiGeometry& g, const void* grad_output, const void* rois,
                         void* grad_input, std::int64_t begin, std::int64_t end) {
  if (begin >= end || g.channels <= 0) return;
  cpu::dispatch_float_kinds(static_cast<int>(kind), [&]<typename T>() {
    using C = cpu::Convert<T>;
    using Acc = decltype(C::load(T{}));
    using Roi = typename Op::template Roi<Acc>;
    const T* go = static_cast<const T*>(grad_output);
    const std::int64_t plane = g.height * g.width;
    const std::int64_t bins = g.pooled_height * g.pooled_width;
    const auto load_roi = [&](std::int64_t k) {
      return ps_roi_cpu::load_roi<Op, T, Acc>(static_cast<const T*>(rois), k, g);
    };
    cpu::overwrite_roi_planes<Roi>(static_cast<T*>(grad_input), begin, end, g.channels, plane, g.rois, load_roi,
                                   [&](std::int64_t c_begin, std::int64_t nc, auto* target,
                                       const std::vector<Roi>& batch_rois,
                                       const std::vector<std::int64_t>& batch_roi_ids) {
        for (std::int64_t c = 0; c < nc; ++c) {
          // Plane c_in = (c_out * PH + ph) * PW + pw gets the gradient of that one bin.
          const std::int64_t c_in = c_begin + c;
          const std::int64_t c_out = c_in / bins, ph = (c_in % bins) / g.pooled_width, pw = c_in % g.pooled_width;
          auto* p = target + c * plane;
          for (std::size_t i = 0; i < batch_rois.size(); ++i) {
            const Acc grad = C::load(go[(batch_roi_ids[i] * g.channels_out + c_out) * bins + ph * g.pooled_width + pw]);
            Op::backward(batch_rois[i], grad, ph, pw, g, [p](std::int64_t o, Acc v) { p[o] += v; });
          }
        }
    });
  });
}

}  // namespace opkiln::kernels

// The CPU drivers for one op's per-bin math `Op` (a type in opkiln::kernels).
#define OPKILN_PS_ROI_CPU(Op)                                                                                   \
  template void opkiln::kernels::ps_roi_forward_cpu<opkiln::kernels::Op>(                                       \
      opkiln::kernels::ScalarKind, const opkiln::kernels::PsRoiGeometry&, const void*, const void*, void*,      \
      std::int32_t*, std::int64_t, std::int64_t);                                                               \
  template void opkiln::kernels::ps_roi_backward_cpu<opkiln::kernels::Op>(                                      \
      opkiln::kernels::ScalarKind, const opkiln::kernels::PsRoiGeometry&, const void*, const void*, void*,      \
      std::int64_t, std::int64_t)
