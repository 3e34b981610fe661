#include "nms/nms.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "nms/nms_iou.h"
#include "common/half_float.h"

namespace opkiln::kernels {

std::int64_t nms_cpu(ScalarKind kind, const void* boxes, const void* scores, std::int64_t n, double iou_threshold,
                     std::int64_t* keep) {
  if (n <= 0) return 0;
  return cpu::dispatch_float_kinds(static_cast<int>(kind), [&]<typename T>() -> std::int64_t {
    using C = cpu::Convert<T>;
    using Acc = decltype(C::load(T{}));
    const T* pb = static_cast<const T*>(boxes);
    const T* ps = static_cast<const T*>(scores);

    using Key = decltype(nms_detail::score_key(Acc{}));
    std::vector<Key> key(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) key[i] = nms_detail::score_key(C::load(ps[i]));
    std::vector<std::int64_t> order(static_cast<std::size_t>(n));
    std::iota(order.begin(), order.end(), std::int64_t{0});
    std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) { return key[a] < key[b]; });

    // Boxes and areas in visiting order, so the inner loop streams memory.
    std::vector<Acc> box(static_cast<std::size_t>(n) * 5);
    for (std::int64_t r = 0; r < n; ++r) {
      const T* b = pb + order[r] * 4;
      Acc* o = box.data() + r * 5;
      for (int k = 0; k < 4; ++k) o[k] = C::load(b[k]);
      o[4] = nms_detail::box_area(o[0], o[1], o[2], o[3]);
    }
    std::vector<unsigned char> removed(static_cast<std::size_t>(n), 0);
    std::int64_t count = 0;
    for (std::int64_t r = 0; r < n; ++r) {
      if (removed[r]) continue;
      keep[count++] = order[r];
      const Acc* bi = box.data() + r * 5;
      for (std::int64_t s = r + 1; s < n; ++s) {
        if (removed[s]) continue;
        const Acc* bj = box.data() + s * 5;
        if (nms_detail::iou_above(bi[0], bi[1], bi[2], bi[3], bi[4], bj[0], bj[1], bj[2], bj[3], bj[4],
                                  iou_threshold)) {
          removed[s] = 1;
        }
      }
    }
    return count;
  });
}

}  // namespace opkiln::kernels
