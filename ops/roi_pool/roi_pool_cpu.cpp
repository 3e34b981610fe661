// RoIPool on the CPU. The forward computes a roi's bins once for all the channels of its range;
// the backward owns whole grad_input planes, so ranges never write the same memory.
#include <cfloat>
#include <vector>

#include "roi_pool/roi_pool.h"
#include "common/cpu_planes.h"
#include "common/half_float.h"
#include "roi_pool/roi_pool_bins.h"

namespace opkiln::kernels {
namespace roi_pool_cpu_core {

using namespace roi_pool_bins;

template <typename T>
struct Kind {
  using C = cpu::Convert<T>;
  using Acc = decltype(C::load(T{}));
  // v rounded to T and back: torchvision's bin arithmetic in the storage dtype.
  static Acc in_storage(Acc v) { return C::load(C::store(v)); }

  static Roi<Acc> roi(const T* rois, std::int64_t k, const RoiShape& s) {
    const T* r = rois + k * kRoiColumns;
    const Acc scale = in_storage(static_cast<Acc>(s.spatial_scale));
    const auto scaled = [&](T v) { return in_storage(C::load(v) * scale); };
    return make_roi<Acc>(C::load(r[0]), scaled(r[1]), scaled(r[2]), scaled(r[3]), scaled(r[4]), Acc(1), s.batch,
                         s.pooled_height, s.pooled_width, in_storage);
  }
};

}  // namespace roi_pool_cpu_core
using namespace roi_pool_cpu_core;

void roi_pool_cpu(ScalarKind kind, const RoiShape& s, const void* input, const void* rois, void* output,
                  std::int32_t* argmax, std::int64_t begin, std::int64_t end) {
  if (begin >= end || s.channels <= 0) return;
  cpu::dispatch_float_kinds(static_cast<int>(kind), [&]<typename T>() {
    using K = Kind<T>;
    using Acc = typename K::Acc;
    const T* in = static_cast<const T*>(input);
    T* out = static_cast<T*>(output);
    const std::int64_t plane = s.height * s.width;
    const std::int64_t bins = s.pooled_height * s.pooled_width;
    const Acc lowest = K::in_storage(-FLT_MAX);
    std::vector<Span> rows, cols;
    cpu::for_each_row_span(begin, end, s.channels, [&](std::int64_t k, std::int64_t c_begin, std::int64_t c_end) {
      // The roi's windows once, then one channel plane at a time (each plane is read while it is in cache).
      const Roi<Acc> roi = K::roi(static_cast<const T*>(rois), k, s);
      rows.clear();
      cols.clear();
      for (std::int64_t ph = 0; ph < s.pooled_height; ++ph) rows.push_back(span(ph, roi.bin_h, roi.y0, s.height, K::in_storage));
      for (std::int64_t pw = 0; pw < s.pooled_width; ++pw) {
        cols.push_back(roi.valid ? span(pw, roi.bin_w, roi.x0, s.width, K::in_storage) : Span{0, 0});
      }
      for (std::int64_t c = c_begin; c < c_end; ++c) {
        const T* channel = in + (roi.batch * s.channels + c) * plane;
        std::int64_t at = (k * s.channels + c) * bins;
        for (const Span& r : rows) {
          for (const Span& col : cols) {
            const Max<Acc> m = window_max(channel, s.width, r, col, lowest, K::C::load);
            out[at] = K::C::store(m.value);
            argmax[at++] = m.index;
          }
        }
      }
    });
  });
}

void roi_pool_backward_cpu(ScalarKind kind, const RoiShape& s, const void* grad_output, const void* rois,
                           const std::int32_t* argmax, void* grad_input, std::int64_t begin, std::int64_t end) {
  if (begin >= end || s.channels <= 0) return;
  cpu::dispatch_float_kinds(static_cast<int>(kind), [&]<typename T>() {
    using K = Kind<T>;
    const T* go = static_cast<const T*>(grad_output);
    const std::int64_t plane = s.height * s.width;
    const std::int64_t bins = s.pooled_height * s.pooled_width;
    std::vector<float> scratch;
    std::vector<std::int64_t> batch_rois;
    cpu::for_each_row_span(begin, end, s.channels, [&](std::int64_t b, std::int64_t c_begin, std::int64_t c_end) {
      batch_rois.clear();
      for (std::int64_t k = 0; k < s.rois; ++k) {
        const auto roi = K::roi(static_cast<const T*>(rois), k, s);
        if (roi.valid && roi.batch == b) batch_rois.push_back(k);
      }
      cpu::overwrite_planes(static_cast<T*>(grad_input) + b * s.channels * plane, c_begin, c_end, plane, scratch,
                            [&](std::int64_t c0, std::int64_t nc, auto* target) {
        for (const std::int64_t k : batch_rois) {
          for (std::int64_t c = 0; c < nc; ++c) {
            const std::int64_t first = (k * s.channels + c0 + c) * bins;
            for (std::int64_t i = first; i < first + bins; ++i) {
              if (argmax[i] >= 0 && argmax[i] < plane) target[c * plane + argmax[i]] += K::C::load(go[i]);
            }
          }
        }
      });
    });
  });
}

}  // namespace opkiln::kernels
