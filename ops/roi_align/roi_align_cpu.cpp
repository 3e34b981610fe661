// RoIAlign on the CPU. The forward walks a roi's bins and samples once and applies each
// sample's bilinear weights to every channel of the range (the sample geometry is the
// costly part, the channels share it); the backward owns whole grad_input planes, so
// ranges never write the same memory.
#include "roi_align/roi_align.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "common/cpu_planes.h"
#include "common/half_float.h"
#include "common/roi_sampling.h"

namespace opkiln::kernels {
namespace roi_align_cpu {

using namespace roi_sampling;

template <typename T, typename Acc>
Roi<Acc> load_roi(const T* r, const RoiAlignGeometry& g) {
  using C = cpu::Convert<T>;
  return make_roi<Acc>(C::load(r[0]), C::load(r[1]), C::load(r[2]), C::load(r[3]), C::load(r[4]),
                       static_cast<Acc>(g.spatial_scale), g);
}

// Calls f(bin, sample) for every bin (ph * PW + pw) and sample of the roi, in the order
// torchvision sums them (iy, then ix).
template <typename Acc, typename F>
void for_each_sample(const Roi<Acc>& roi, const RoiAlignGeometry& g, F&& f) {
  for (std::int64_t ph = 0; ph < g.pooled_height; ++ph) {
    for (std::int64_t pw = 0; pw < g.pooled_width; ++pw) {
      const std::int64_t bin = ph * g.pooled_width + pw;
      for (std::int64_t iy = 0; iy < roi.grid_h; ++iy) {
        const Acc y = sample_y(roi, ph, iy);
        for (std::int64_t ix = 0; ix < roi.grid_w; ++ix) {
          f(bin, bilinear(g.height, g.width, y, sample_x(roi, pw, ix)));
        }
      }
    }
  }
}

}  // namespace roi_align_cpu
using namespace roi_align_cpu;

void roi_align_forward_cpu(ScalarKind kind, const RoiAlignGeometry& g, const void* input, const void* rois,
                           void* output, std::int64_t begin, std::int64_t end) {
  if (begin >= end || g.channels <= 0) return;
  cpu::dispatch_float_kinds(static_cast<int>(kind), [&]<typename T>() {
    using C = cpu::Convert<T>;
    using Acc = decltype(C::load(T{}));
    const T* in = static_cast<const T*>(input);
    const T* r = static_cast<const T*>(rois);
    T* out = static_cast<T*>(output);
    const std::int64_t plane_in = g.height * g.width;
    const std::int64_t bins = g.pooled_height * g.pooled_width;
    std::vector<Acc> acc;
    cpu::for_each_row_span(begin, end, g.channels, [&](std::int64_t k, std::int64_t c_begin, std::int64_t c_end) {
      const std::int64_t nc = c_end - c_begin;
      T* out_k = out + (k * g.channels + c_begin) * bins;
      const Roi<Acc> roi = load_roi<T, Acc>(r + k * kRoiColumns, g);
      if (!roi.valid) {
        std::fill(out_k, out_k + nc * bins, C::store(Acc(0)));
        return;
      }
      const T* in_k = in + (roi.batch * g.channels + c_begin) * plane_in;
      acc.assign(static_cast<std::size_t>(nc * bins), Acc(0));
      for_each_sample(roi, g, [&](std::int64_t bin, const Sample<Acc>& s) {
        if (!s.valid) return;
        for (std::int64_t c = 0; c < nc; ++c) {
          const T* p = in_k + c * plane_in;
          acc[c * bins + bin] += s.w1 * C::load(p[s.o1]) + s.w2 * C::load(p[s.o2]) + s.w3 * C::load(p[s.o3]) +
                                 s.w4 * C::load(p[s.o4]);
        }
      });
      for (std::int64_t i = 0; i < nc * bins; ++i) out_k[i] = C::store(acc[i] / roi.count);
    });
  });
}

void roi_align_backward_cpu(ScalarKind kind, const RoiAlignGeometry& g, const void* grad_output, const void* rois,
                            void* grad_input, std::int64_t begin, std::int64_t end) {
  if (begin >= end || g.channels <= 0) return;
  cpu::dispatch_float_kinds(static_cast<int>(kind), [&]<typename T>() {
    using C = cpu::Convert<T>;
    using Acc = decltype(C::load(T{}));
    const T* go = static_cast<const T*>(grad_output);
    const T* r = static_cast<const T*>(rois);
    T* gi = static_cast<T*>(grad_input);
    const std::int64_t plane_in = g.height * g.width;
    const std::int64_t bins = g.pooled_height * g.pooled_width;
    std::vector<float> scratch;
    std::vector<Roi<Acc>> batch_rois;
    std::vector<std::int64_t> batch_roi_ids;
    cpu::for_each_row_span(begin, end, g.channels, [&](std::int64_t b, std::int64_t b_c_begin, std::int64_t b_c_end) {
      batch_rois.clear();
      batch_roi_ids.clear();
      for (std::int64_t k = 0; k < g.rois; ++k) {
        const Roi<Acc> roi = load_roi<T, Acc>(r + k * kRoiColumns, g);
        if (roi.valid && roi.batch == b) {
          batch_rois.push_back(roi);
          batch_roi_ids.push_back(k);
        }
      }
      cpu::overwrite_planes(gi + b * g.channels * plane_in, b_c_begin, b_c_end, plane_in, scratch,
                            [&](std::int64_t c_begin, std::int64_t nc, Acc* target) {
        for (std::size_t i = 0; i < batch_rois.size(); ++i) {
          const Roi<Acc>& roi = batch_rois[i];
          const T* go_k = go + (batch_roi_ids[i] * g.channels + c_begin) * bins;
          for_each_sample(roi, g, [&](std::int64_t bin, const Sample<Acc>& s) {
            if (!s.valid) return;
            for (std::int64_t c = 0; c < nc; ++c) {
              const Acc grad = C::load(go_k[c * bins + bin]) / roi.count;
              Acc* p = target + c * plane_in;
              p[s.o1] += grad * s.w1;
              p[s.o2] += grad * s.w2;
              p[s.o3] += grad * s.w3;
              p[s.o4] += grad * s.w4;
            }
          });
        }
      });
    });
  });
}

}  // namespace opkiln::kernels
