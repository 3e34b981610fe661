// The CPU drivers of the RoI family (common/roi_family.h): a roi's taps are computed once (all its
// bins) and then folded for one channel plane at a time, so a plane is read while it is in cache
// and the taps' geometry (the costly part of a bilinear sample) is shared by every channel. The
// backward owns whole grad_input planes. Include it in the op's CPU source and instantiate with
// OPKILN_ROI_FAMILY_CPU(Op).
#pragma once

#include <algorithm>
#include <array>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/cpu_planes.h"
#include "common/half_float.h"
#include "common/roi_family.h"

namespace opkiln::kernels::roi_family_cpu {

template <typename T>
struct InStorage {
  using C = cpu::Convert<T>;
  using Acc = decltype(C::load(T{}));
  Acc operator()(Acc v) const { return C::load(C::store(v)); }
};

// Roi k of the op (x: the kernel's cpu::RoiKernel).
template <typename Op, typename X, typename Geometry>
auto load_roi(const X& x, std::int64_t k, const Geometry& g) {
  using T = typename X::T;
  return x.template roi<kBoxColumns<Op>>(
      k, [&](auto... v) { return Op::template roi<typename X::Acc>(v..., g, InStorage<T>{}); });
}

// An op whose every bin is one tap (roi_pool's window) says so with `static constexpr bool kOneTap
// = true`: its taps are then stored one per bin, with no per-bin index list to walk.
template <typename Op>
constexpr bool kOneTap = requires { requires Op::kOneTap; };

// How many channel planes the forward folds side by side (independent folds the CPU overlaps, and a
// tap read once for all of them): an op may say with `static constexpr int kPlanes`.
template <typename Op>
constexpr int kPlanes = [] {
  if constexpr (requires { Op::kPlanes; }) {
    return int{Op::kPlanes};
  } else {
    return 4;
  }
}();

// G copies of Op::start(roi).
template <typename Op, int G, typename Roi>
auto start_planes(const Roi& roi) {
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    return std::array<decltype(Op::start(roi)), G>{((void)I, Op::start(roi))...};
  }(std::make_index_sequence<G>{});
}

// One tap folded into the states of G planes (load(i, offset): plane i's value): the op's own
// `fold_planes<G>(states, tap, load)` where it has one (a loop that interleaves the planes, for a
// tap that is itself a loop: roi_pool's window), else its fold per plane.
template <typename Op, int G, typename State, typename Tap, typename Load>
void fold_planes(std::array<State, G>& state, const Tap& tap, const Load& load) {
  if constexpr (requires { Op::template fold_planes<G>(state, tap, load); }) {
    Op::template fold_planes<G>(state, tap, load);
  } else {
    for (int i = 0; i < G; ++i) Op::fold(state[i], tap, [&load, i](std::int64_t o) { return load(i, o); });
  }
}

// The taps of every bin of a roi, bin after bin: bin i's are taps[first[i] .. first[i + 1]);
// for a kOneTap op, bin i's is taps[i] (first stays empty).
template <typename Op, typename Acc>
struct RoiTaps {
  std::vector<typename Op::template Tap<Acc>> taps;
  std::vector<std::size_t> first;

  template <typename Geometry, typename Round>
  void build(const typename Op::template Roi<Acc>& roi, const Geometry& g, Round round) {
    taps.clear();
    first.clear();
    for (std::int64_t ph = 0; ph < g.pooled_height; ++ph) {
      for (std::int64_t pw = 0; pw < g.pooled_width; ++pw) {
        if constexpr (!kOneTap<Op>) first.push_back(taps.size());
        Op::taps(roi, ph, pw, g, round, [this](const auto& t) { taps.push_back(t); });
      }
    }
    if constexpr (!kOneTap<Op>) first.push_back(taps.size());
  }
};

}  // namespace opkiln::kernels::roi_family_cpu

namespace opkiln::kernels {

template <typename Op>
void roi_family_forward_cpu(ScalarKind kind, const RoiGeometry<Op>& g, const void* input, const void* rois,
                            void* output, std::int32_t* index, std::int64_t begin, std::int64_t end) {
  if (begin >= end || g.channels <= 0) return;
  cpu::dispatch_roi_kernel(kind, g, input, rois, output, [&]<typename X>(const X& x) {
    using Acc = typename X::Acc;
    roi_family_cpu::RoiTaps<Op, Acc> taps;
    const std::int64_t plane = x.plane, bins = x.bins;
    cpu::for_each_row_span(begin, end, g.channels, [&](std::int64_t k, std::int64_t c_begin, std::int64_t c_end) {
      const auto roi = roi_family_cpu::load_roi<Op>(x, k, g);
      std::int64_t at = (k * g.channels + c_begin) * bins;
      if (!roi.valid) {
        std::fill(x.out + at, x.out + at + (c_end - c_begin) * bins, X::store(Acc(0)));
        if constexpr (Op::kIndex) std::fill(index + at, index + at + (c_end - c_begin) * bins, -1);
        return;
      }
      taps.build(roi, g, roi_family_cpu::InStorage<typename X::T>{});
      const auto* tap = taps.taps.data();  // locals: the stores below cannot make the compiler reload them
      const std::size_t* first = taps.first.data();
      auto* out = x.out;
      // kPlanes channels at a time, then one: each channel's fold is the same as alone.
      const auto planes = [&]<int G>(std::int64_t c) {
        const auto* p = x.in + (roi.batch * g.channels + c) * plane;
        const auto load = [p, plane](int i, std::int64_t o) { return X::load(p[i * plane + o]); };
        for (std::int64_t bin = 0; bin < bins; ++bin, ++at) {
          auto state = roi_family_cpu::start_planes<Op, G>(roi);  // (no default constructor asked of State)
          if constexpr (roi_family_cpu::kOneTap<Op>) {
            roi_family_cpu::fold_planes<Op, G>(state, tap[bin], load);
          } else {
            for (std::size_t t = first[bin]; t < first[bin + 1]; ++t) {
              roi_family_cpu::fold_planes<Op, G>(state, tap[t], load);
            }
          }
          for (int i = 0; i < G; ++i) {
            const RoiValue<Acc> v = Op::finish(roi, state[i]);
            out[at + i * bins] = X::store(v.value);
            if constexpr (Op::kIndex) index[at + i * bins] = v.index;
          }
        }
        at += (G - 1) * bins;
      };
      constexpr int kGroup = roi_family_cpu::kPlanes<Op>;
      std::int64_t c = c_begin;
      for (; c + kGroup <= c_end; c += kGroup) planes.template operator()<kGroup>(c);
      for (; c < c_end; ++c) planes.template operator()<1>(c);
    });
  });
}

template <typename Op>
void roi_family_backward_cpu(ScalarKind kind, const RoiGeometry<Op>& g, const void* grad_output, const void* rois,
                             const std::int32_t* index, void* grad_input, std::int64_t begin, std::int64_t end) {
  cpu::roi_backward_planes(
      kind, g, grad_output, rois, grad_input, begin, end,
      [&](const auto& x, std::int64_t k) { return roi_family_cpu::load_roi<Op>(x, k, g); },
      [&]<typename X>(const X& x, std::int64_t c_begin, std::int64_t nc, auto* target, const auto& batch_rois,
                      const std::vector<std::int64_t>& batch_roi_ids) {
        using Acc = typename X::Acc;
        roi_family_cpu::RoiTaps<Op, Acc> taps;
        const auto* go = x.in;
        const std::int64_t plane = x.plane, bins = x.bins;
        for (std::size_t i = 0; i < batch_rois.size(); ++i) {
          if constexpr (!Op::kIndex) taps.build(batch_rois[i], g, roi_family_cpu::InStorage<typename X::T>{});
          for (std::int64_t c = 0; c < nc; ++c) {
            const std::int64_t first = (batch_roi_ids[i] * g.channels + c_begin + c) * bins;
            auto* p = target + c * plane;
            for (std::int64_t bin = 0; bin < bins; ++bin) {
              if constexpr (Op::kIndex) {
                const std::int32_t a = index[first + bin];
                if (a >= 0 && a < plane) p[a] += X::load(go[first + bin]);
              } else {
                const Acc grad = Op::grad(batch_rois[i], X::load(go[first + bin]));
                const auto add = [p](std::int64_t o, Acc v) { p[o] += v; };
                if constexpr (roi_family_cpu::kOneTap<Op>) {
                  Op::scatter(taps.taps[bin], grad, add);
                } else {
                  for (std::size_t t = taps.first[bin]; t < taps.first[bin + 1]; ++t) Op::scatter(taps.taps[t], grad, add);
                }
              }
            }
          }
        }
      });
}

}  // namespace opkiln::kernels

// The CPU drivers for one op's per-bin math `Op` (a type in opkiln::kernels).
#define OPKILN_ROI_FAMILY_CPU(Op)                                                                                      \
  template void opkiln::kernels::roi_family_forward_cpu<opkiln::kernels::Op>(                                          \
      opkiln::kernels::ScalarKind, const opkiln::kernels::RoiGeometry<opkiln::kernels::Op>&, const void*,              \
      const void*, void*, std::int32_t*, std::int64_t, std::int64_t);                                                  \
  template void opkiln::kernels::roi_family_backward_cpu<opkiln::kernels::Op>(                                         \
      opkiln::kernels::ScalarKind, const opkiln::kernels::RoiGeometry<opkiln::kernels::Op>&, const void*,              \
      const void*, const std::int32_t*, void*, std::int64_t, std::int64_t)
