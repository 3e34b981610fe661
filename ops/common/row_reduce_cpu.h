// The CPU drivers of the row-wise reduction ops (common/row_reduce.h). Include it in the op's CPU
// source and instantiate with OPKILN_ROW_REDUCE_CPU(Op) (and OPKILN_ROW_REDUCE_BACKWARD_CPU(Op)).
#pragma once

#include "common/half_float.h"
#include "common/row_reduce.h"

namespace opkiln::kernels::row_reduce_cpu {

// Eight interleaved partial sums added in lane order: the compiler may vectorize them without
// reassociating one long chain, and the order is fixed (rms_norm's CPU kernel sums with it too).
constexpr int kLanes = 8;

template <typename Acc, typename F>
Acc lane_sum(std::int64_t n, F&& term) {
  Acc part[kLanes] = {};
  std::int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes) {
    for (int k = 0; k < kLanes; ++k) part[k] += term(c + k);
  }
  for (; c < n; ++c) part[0] += term(c);
  Acc total = 0;
  for (int k = 0; k < kLanes; ++k) total += part[k];
  return total;
}

}  // namespace opkiln::kernels::row_reduce_cpu

namespace opkiln::kernels {

template <typename Op>
void row_reduce_forward_cpu(ScalarKind kind, const RowShape& s, const void* x, const void* w, void* y, void* stat,
                            double eps, std::int64_t begin, std::int64_t end) {
  cpu::dispatch_float_kinds(static_cast<int>(kind), [&]<typename T>() {
    using C = cpu::Convert<T>;
    using Acc = decltype(C::load(T{}));
    const T* px = static_cast<const T*>(x);
    const T* pw = static_cast<const T*>(w);
    T* py = static_cast<T*>(y);
    Acc* ps = static_cast<Acc*>(stat);
    for (std::int64_t r = begin; r < end; ++r) {
      const T* xr = px + r * s.cols;
      T* yr = py + r * s.cols;
      const Acc sum = row_reduce_cpu::lane_sum<Acc>(s.cols, [&](std::int64_t c) { return Op::term(C::load(xr[c])); });
      const Acc st = Op::stat(sum, s.cols, static_cast<Acc>(eps));
      ps[r] = st;
      for (std::int64_t c = 0; c < s.cols; ++c) yr[c] = C::store(Op::apply(C::load(xr[c]), C::load(pw[c]), st));
    }
  });
}

template <typename Op>
void row_reduce_backward_cpu(ScalarKind kind, const RowShape& s, const void* grad, const void* x, const void* w,
                             const void* stat, void* dx, void* dw_acc, std::int64_t begin, std::int64_t end) {
  cpu::dispatch_float_kinds(static_cast<int>(kind), [&]<typename T>() {
    using C = cpu::Convert<T>;
    using Acc = decltype(C::load(T{}));
    const T* pg = static_cast<const T*>(grad);
    const T* px = static_cast<const T*>(x);
    const T* pw = static_cast<const T*>(w);
    const Acc* ps = static_cast<const Acc*>(stat);
    T* pdx = static_cast<T*>(dx);
    Acc* pdw = static_cast<Acc*>(dw_acc);
    for (std::int64_t r = begin; r < end; ++r) {
      const T* gr = pg + r * s.cols;
      const T* xr = px + r * s.cols;
      T* dxr = pdx + r * s.cols;
      const Acc st = ps[r];
      const Acc sum = row_reduce_cpu::lane_sum<Acc>(s.cols, [&](std::int64_t c) {
        return Op::grad_term(C::load(gr[c]), C::load(xr[c]), C::load(pw[c]), st);
      });
      const Acc coef = Op::grad_row(st, sum, s.cols);
      for (std::int64_t c = 0; c < s.cols; ++c) {
        const Acc g = C::load(gr[c]);
        const Acc xv = C::load(xr[c]);
        dxr[c] = C::store(Op::grad_x(g, xv, C::load(pw[c]), st, coef));
        pdw[c] += Op::grad_w(g, xv, st);
      }
    }
  });
}

template <typename Op>
void row_reduce_sum_parts_cpu(ScalarKind kind, const void* partial, std::int64_t parts, std::int64_t cols, void* dw,
                              std::int64_t begin, std::int64_t end) {
  cpu::dispatch_float_kinds(static_cast<int>(kind), [&]<typename T>() {
    using C = cpu::Convert<T>;
    using Acc = decltype(C::load(T{}));
    const Acc* pp = static_cast<const Acc*>(partial);
    T* pdw = static_cast<T*>(dw);
    for (std::int64_t c = begin; c < end; ++c) {
      Acc sum = 0;
      for (std::int64_t p = 0; p < parts; ++p) sum += pp[p * cols + c];
      pdw[c] = C::store(sum);
    }
  });
}

}  // namespace opkiln::kernels

// The CPU forward for one op's per-row math `Op` (a type in opkiln::kernels).
#define OPKILN_ROW_REDUCE_CPU(Op)                                                                                  \
  template void opkiln::kernels::row_reduce_forward_cpu<opkiln::kernels::Op>(                                      \
      opkiln::kernels::ScalarKind, const opkiln::kernels::RowShape&, const void*, const void*, void*, void*, double, \
      std::int64_t, std::int64_t)
// Its CPU backward.
#define OPKILN_ROW_REDUCE_BACKWARD_CPU(Op)                                                                         \
  template void opkiln::kernels::row_reduce_backward_cpu<opkiln::kernels::Op>(                                     \
      opkiln::kernels::ScalarKind, const opkiln::kernels::RowShape&, const void*, const void*, const void*,        \
      const void*, void*, void*, std::int64_t, std::int64_t);                                                     \
  template void opkiln::kernels::row_reduce_sum_parts_cpu<opkiln::kernels::Op>(                                    \
      opkiln::kernels::ScalarKind, const void*, std::int64_t, std::int64_t, void*, std::int64_t, std::int64_t)
