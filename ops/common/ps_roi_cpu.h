// The CPU drivers of the position-sensitive RoI ops (common/ps_roi.h): the loops over rois,
// channels and bins, and the plane ownership of the backward. Include it in the op's CPU
// source and instantiate with OPKILN_PS_ROI_CPU(Op).
#pragma once

#include <algorithm>
#include <array>
#include <type_traits>
#include <vector>

#include "common/cpu_planes.h"
#include "common/half_float.h"
#include "common/ps_roi.h"

namespace opkiln::kernels::ps_roi_cpu {

// Roi k of the op (x: the kernel's cpu::RoiKernel).
template <typename Op, typename X>
auto load_roi(const X& x, std::int64_t k, const PsRoiGeometry& g) {
  return x.roi(k, [&](auto... v) { return Op::template roi<typename X::Acc>(v..., g); });
}

// Bin (ph, pw) of G planes (load(i, offset): plane i's value): the op's own
// `forward_planes<G>(roi, ph, pw, g, load)` where it has one (the bin's geometry once for all G),
// else its forward per plane.
template <typename Op, int G, typename Roi, typename Load>
auto forward_planes(const Roi& roi, std::int64_t ph, std::int64_t pw, const PsRoiGeometry& g, const Load& load) {
  if constexpr (requires { Op::template forward_planes<G>(roi, ph, pw, g, load); }) {
    return Op::template forward_planes<G>(roi, ph, pw, g, load);
  } else {
    std::array<decltype(load(0, std::int64_t{0})), G> v;
    for (int i = 0; i < G; ++i) v[i] = Op::forward(roi, ph, pw, g, [&load, i](std::int64_t o) { return load(i, o); });
    return v;
  }
}

// Bin (ph, pw)'s gradients grad[i] into G planes (add(i, offset, value)): the op's own
// `backward_planes<G>` where it has one, else its backward per plane.
template <typename Op, int G, typename Roi, typename Acc, typename Add>
void backward_planes(const Roi& roi, const std::array<Acc, G>& grad, std::int64_t ph, std::int64_t pw,
                     const PsRoiGeometry& g, const Add& add) {
  if constexpr (requires { Op::template backward_planes<G>(roi, grad, ph, pw, g, add); }) {
    Op::template backward_planes<G>(roi, grad, ph, pw, g, add);
  } else {
    for (int i = 0; i < G; ++i) {
      Op::backward(roi, grad[i], ph, pw, g, [&add, i](std::int64_t o, Acc v) { add(i, o, v); });
    }
  }
}

}  // namespace opkiln::kernels::ps_roi_cpu

namespace opkiln::kernels {

template <typename Op>
void ps_roi_forward_cpu(ScalarKind kind, const PsRoiGeometry& g, const void* input, const void* rois, void* output,
                        std::int32_t* channel_mapping, std::int64_t begin, std::int64_t end) {
  if (begin >= end || g.channels_out <= 0) return;
  cpu::dispatch_roi_kernel(kind, g, input, rois, output, [&]<typename X>(const X& x) {
    const std::int64_t plane = x.plane, bins = x.bins;
    cpu::for_each_row_span(begin, end, g.channels_out, [&](std::int64_t k, std::int64_t c_begin, std::int64_t c_end) {
      const auto roi = ps_roi_cpu::load_roi<Op>(x, k, g);
      const std::int64_t first = k * g.channels_out * bins;
      // Bin by bin, each bin's geometry once for G output channels side by side (c_out + i reads
      // plane c_in + i * bins); every output is what Op::forward gives for it alone.
      for (std::int64_t ph = 0; ph < g.pooled_height; ++ph) {
        for (std::int64_t pw = 0; pw < g.pooled_width; ++pw) {
          const std::int64_t bin = ph * g.pooled_width + pw;
          // G planes from c_out, of which the first n are real (the others read nothing, give 0 and are
          // not stored: a tail of n < G channels still computes the bin's geometry once).
          const auto planes = [&]<int G>(std::int64_t c_out, int n) {
            const std::int64_t c_in = ps_input_channel(c_out, ph, pw, g);
            std::array<typename X::Acc, G> v{};
            if (roi.valid) {
              const auto* p = x.in + (roi.batch * g.channels + c_in) * plane;
              const std::int64_t stride = bins * plane;
              v = ps_roi_cpu::forward_planes<Op, G>(roi, ph, pw, g, [p, stride, n](int i, std::int64_t o) {
                return i < n ? X::load(p[i * stride + o]) : typename X::Acc(0);
              });
            }
            for (int i = 0; i < n; ++i) {
              const std::int64_t at = first + (c_out + i) * bins + bin;
              x.out[at] = X::store(v[i]);
              channel_mapping[at] = static_cast<std::int32_t>(c_in + i * bins);
            }
          };
          std::int64_t c = c_begin;
          for (; c + 8 <= c_end; c += 8) planes.template operator()<8>(c, 8);
          const auto rest = static_cast<int>(c_end - c);
          if (rest > 4) {
            planes.template operator()<8>(c, rest);
          } else if (rest > 1) {
            planes.template operator()<4>(c, rest);
          } else if (rest == 1) {
            planes.template operator()<1>(c, 1);
          }
        }
      }
    });
  });
}

template <typename Op>
void ps_roi_backward_cpu(ScalarKind kind, const PsRoiGeometry& g, const void* grad_output, const void* rois,
                         void* grad_input, std::int64_t begin, std::int64_t end) {
  cpu::roi_backward_planes</*kZero=*/false>(  // each plane zeroed just before its bin's adds
      kind, g, grad_output, rois, grad_input, begin, end,
      [&](const auto& x, std::int64_t k) { return ps_roi_cpu::load_roi<Op>(x, k, g); },
      [&]<typename X>(const X& x, std::int64_t c_begin, std::int64_t nc, auto* target, const auto& batch_rois,
                      const std::vector<std::int64_t>& batch_roi_ids) {
        using Acc = typename X::Acc;
        const std::int64_t plane = x.plane, bins = x.bins;
        // Planes c_in = c_out * bins + bin share bin (ph, pw): for each bin and roi, the bin's geometry
        // once for G of them side by side. Each plane still gets its rois' gradients in roi order.
        for (std::int64_t bin = 0; bin < bins; ++bin) {
          const std::int64_t ph = bin / g.pooled_width, pw = bin % g.pooled_width;
          // c_out whose plane c_out * bins + bin lies in [c_begin, c_begin + nc)
          const std::int64_t lo = (c_begin - bin + bins - 1) / bins;
          const std::int64_t hi = (c_begin + nc - bin + bins - 1) / bins;
          if (lo >= hi) continue;
          for (std::int64_t c_out = lo; c_out < hi; ++c_out) {
            auto* p = target + (c_out * bins + bin - c_begin) * plane;
            std::fill(p, p + plane, Acc(0));
          }
          for (std::size_t i = 0; i < batch_rois.size(); ++i) {
            const auto* grads = x.in + batch_roi_ids[i] * g.channels_out * bins + bin;  // c_out's at c_out * bins
            const auto planes = [&]<int G>(std::int64_t c_out) {
              std::array<Acc, G> grad;
              for (int j = 0; j < G; ++j) grad[j] = X::load(grads[(c_out + j) * bins]);
              auto* p = target + (c_out * bins + bin - c_begin) * plane;
              const std::int64_t stride = bins * plane;
              ps_roi_cpu::backward_planes<Op, G>(batch_rois[i], grad, ph, pw, g,
                                                 [p, stride](int j, std::int64_t o, Acc v) { p[j * stride + o] += v; });
            };
            std::int64_t c_out = lo;
            for (; c_out + 8 <= hi; c_out += 8) planes.template operator()<8>(c_out);
            for (; c_out + 4 <= hi; c_out += 4) planes.template operator()<4>(c_out);
            for (; c_out < hi; ++c_out) planes.template operator()<1>(c_out);
          }
        }
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
