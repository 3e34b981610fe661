#include "nms/nms.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <type_traits>
#include <vector>

#include "nms/nms_iou.h"
#include "common/half_float.h"

namespace opkiln::kernels {
namespace {

// The threshold as a value of the IoU's own type that decides `static_cast<double>(iou) > threshold`
// exactly by `iou > t`: for float, t is the largest float <= threshold (x > t holds exactly when x is
// at least the next float, which is above threshold; NaN stays NaN, so nothing is above it).
template <typename Acc>
Acc threshold_as(double threshold) {
  if constexpr (std::is_same_v<Acc, double>) {
    return threshold;
  } else {
    Acc t = static_cast<Acc>(threshold);
    if (static_cast<double>(t) > threshold) t = std::nextafter(t, -std::numeric_limits<Acc>::infinity());
    return t;
  }
}

}  // namespace

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

    // The boxes' coordinates and areas in visiting order, one array each, so the inner loop is a
    // branch-free pass the compiler vectorizes.
    const auto size = static_cast<std::size_t>(n);
    std::vector<Acc> x1(size), y1(size), x2(size), y2(size), area(size);
    for (std::int64_t r = 0; r < n; ++r) {
      const T* b = pb + order[r] * 4;
      x1[r] = C::load(b[0]);
      y1[r] = C::load(b[1]);
      x2[r] = C::load(b[2]);
      y2[r] = C::load(b[3]);
      area[r] = nms_detail::box_area(x1[r], y1[r], x2[r], y2[r]);
    }
    const Acc threshold = threshold_as<Acc>(iou_threshold);
    std::vector<unsigned char> removed(size, 0);
    std::int64_t count = 0;
    for (std::int64_t r = 0; r < n; ++r) {
      if (removed[r]) continue;
      keep[count++] = order[r];
      const Acc ix1 = x1[r], iy1 = y1[r], ix2 = x2[r], iy2 = y2[r], iarea = area[r];
      // Boxes already removed are tested again (setting removed twice changes nothing): no branch.
      for (std::int64_t s = r + 1; s < n; ++s) {
        removed[s] |= static_cast<unsigned char>(
            nms_detail::iou(ix1, iy1, ix2, iy2, iarea, x1[s], y1[s], x2[s], y2[s], area[s]) > threshold);
      }
    }
    return count;
  });
}

}  // namespace opkiln::kernels
