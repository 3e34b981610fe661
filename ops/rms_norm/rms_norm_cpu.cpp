#include "rms_norm/rms_norm.h"

#include <cmath>

#include "common/half_float.h"
#include "common/row_reduce_cpu.h"

namespace opkiln::kernels {

// Row sums: the row-wise home's fixed-order eight-lane sum (common/row_reduce_cpu.h).

void rms_norm_forward_cpu(ScalarKind kind, const void* x, const void* w, void* y, void* rstd,
                          std::int64_t row_begin, std::int64_t row_end, std::int64_t cols, double eps) {
  cpu::dispatch_float_kinds(static_cast<int>(kind), [&]<typename T>() {
    using C = cpu::Convert<T>;
    using Acc = decltype(C::load(T{}));
    const T* __restrict px = static_cast<const T*>(x);
    const T* __restrict pw = static_cast<const T*>(w);
    T* __restrict py = static_cast<T*>(y);
    Acc* __restrict pr = static_cast<Acc*>(rstd);
    for (std::int64_t r = row_begin; r < row_end; ++r) {
      const T* xr = px + r * cols;
      T* yr = py + r * cols;
      const Acc ss = row_reduce_cpu::lane_sum<Acc>(cols, [&](std::int64_t c) {
        const Acc v = C::load(xr[c]);
        return v * v;
      });
      // cols == 0: mean of nothing; rstd = 1/sqrt(eps) (no row to scale anyway).
      const Acc mean = cols > 0 ? ss / static_cast<Acc>(cols) : Acc(0);
      const Acc inv = Acc(1) / std::sqrt(mean + static_cast<Acc>(eps));
      pr[r] = inv;
      for (std::int64_t c = 0; c < cols; ++c) yr[c] = C::store(C::load(xr[c]) * inv * C::load(pw[c]));
    }
  });
}

void rms_norm_backward_cpu(ScalarKind kind, const void* grad, const void* x, const void* w, const void* rstd,
                           void* dx, void* dw_acc, std::int64_t row_begin, std::int64_t row_end, std::int64_t cols) {
  cpu::dispatch_float_kinds(static_cast<int>(kind), [&]<typename T>() {
    using C = cpu::Convert<T>;
    using Acc = decltype(C::load(T{}));
    const T* __restrict pg = static_cast<const T*>(grad);
    const T* __restrict px = static_cast<const T*>(x);
    const T* __restrict pw = static_cast<const T*>(w);
    const Acc* __restrict pr = static_cast<const Acc*>(rstd);
    T* __restrict pdx = static_cast<T*>(dx);
    Acc* __restrict pdw = static_cast<Acc*>(dw_acc);
    for (std::int64_t r = row_begin; r < row_end; ++r) {
      const T* gr = pg + r * cols;
      const T* xr = px + r * cols;
      T* dxr = pdx + r * cols;
      const Acc inv = pr[r];
      const Acc dot = row_reduce_cpu::lane_sum<Acc>(cols, [&](std::int64_t c) {
        return C::load(gr[c]) * C::load(pw[c]) * C::load(xr[c]);
      });
      const Acc coef = cols > 0 ? inv * inv * dot / static_cast<Acc>(cols) : Acc(0);
      for (std::int64_t c = 0; c < cols; ++c) {
        const Acc g = C::load(gr[c]);
        const Acc xv = C::load(xr[c]);
        dxr[c] = C::store(inv * (g * C::load(pw[c]) - xv * coef));
        pdw[c] += g * xv * inv;
      }
    }
  });
}

void rms_norm_reduce_dw_cpu(ScalarKind kind, const void* partial, std::int64_t parts, void* dw,
                            std::int64_t col_begin, std::int64_t col_end, std::int64_t cols) {
  cpu::dispatch_float_kinds(static_cast<int>(kind), [&]<typename T>() {
    using C = cpu::Convert<T>;
    using Acc = decltype(C::load(T{}));
    const Acc* __restrict pp = static_cast<const Acc*>(partial);
    T* __restrict pdw = static_cast<T*>(dw);
    for (std::int64_t c = col_begin; c < col_end; ++c) {
      Acc s = 0;
      for (std::int64_t p = 0; p < parts; ++p) s += pp[p * cols + c];
      pdw[c] = C::store(s);
    }
  });
}

}  // namespace opkiln::kernels
