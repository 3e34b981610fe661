#include "weighted_sum/weighted_sum.h"

#include "common/half_float.h"

namespace opkiln::kernels {

void weighted_sum_cpu(ScalarKind kind, const void* a, const void* b, void* out,
                      std::int64_t begin, std::int64_t end, double alpha) {
  cpu::dispatch_float_kinds(static_cast<int>(kind), [&]<typename T>() {
    using C = cpu::Convert<T>;
    using Acc = decltype(C::load(T{}));
    const T* __restrict pa = static_cast<const T*>(a);
    const T* __restrict pb = static_cast<const T*>(b);
    T* __restrict po = static_cast<T*>(out);
    const Acc wa = static_cast<Acc>(alpha);
    const Acc wb = static_cast<Acc>(1.0 - alpha);
    for (std::int64_t i = begin; i < end; ++i) {
      po[i] = C::store(wa * C::load(pa[i]) + wb * C::load(pb[i]));
    }
  });
}

}  // namespace opkiln::kernels
