// RoIAlign on the CPU. The forward walks a roi's bins and samples once and applies each
// sample's bilinear weights to every channel of the range (the sample geometry is the
// costly part, the channels share it); the backward owns whole grad_input planes, so
// ranges never write the same memory.
#include "roi_align/roi_align.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "common/half_float.h"

namespace opkiln::kernels {
namespace roi_align_cpu {

// A roi in sampling terms: where its grid starts, the bin and sample steps, the grid size.
template <typename Acc>
struct Roi {
  bool valid = false;
  std::int64_t batch = 0;
  Acc y0 = 0, x0 = 0, bin_h = 0, bin_w = 0, step_h = 0, step_w = 0;
  std::int64_t grid_h = 0, grid_w = 0;
  Acc count = 1;
};

constexpr std::int64_t kMaxAdaptiveGrid = 0x7fffffff;

template <typename Acc>
bool batch_index_valid(Acc v, std::int64_t batch) {
  // trunc(v) in [0, batch); false for NaN.
  return v > Acc(-1) && v < static_cast<Acc>(batch);
}

template <typename T, typename Acc>
Roi<Acc> load_roi(const T* r, const RoiAlignGeometry& g) {
  using C = cpu::Convert<T>;
  Roi<Acc> roi;
  const Acc b = C::load(r[0]);
  if (!batch_index_valid(b, g.batch) || g.height <= 0 || g.width <= 0) return roi;
  roi.valid = true;
  roi.batch = static_cast<std::int64_t>(b);
  const Acc scale = static_cast<Acc>(g.spatial_scale);
  const Acc offset = g.aligned ? Acc(0.5) : Acc(0);
  const Acc x1 = C::load(r[1]) * scale - offset;
  const Acc y1 = C::load(r[2]) * scale - offset;
  const Acc x2 = C::load(r[3]) * scale - offset;
  const Acc y2 = C::load(r[4]) * scale - offset;
  Acc roi_w = x2 - x1;
  Acc roi_h = y2 - y1;
  if (!g.aligned) {
    roi_w = std::max(roi_w, Acc(1));
    roi_h = std::max(roi_h, Acc(1));
  }
  roi.y0 = y1;
  roi.x0 = x1;
  roi.bin_h = roi_h / static_cast<Acc>(g.pooled_height);
  roi.bin_w = roi_w / static_cast<Acc>(g.pooled_width);
  // A negative size (aligned rois with x2 < x1) gives an empty grid: output 0. So does a
  // NaN, infinite or absurd (over 2^31 samples per axis) size, where torchvision's int cast
  // is undefined.
  const auto adaptive = [](Acc bin) -> std::int64_t {
    const Acc n = std::ceil(bin);
    return n > Acc(0) && n <= Acc(kMaxAdaptiveGrid) ? static_cast<std::int64_t>(n) : 0;
  };
  roi.grid_h = g.sampling_ratio > 0 ? g.sampling_ratio : adaptive(roi.bin_h);
  roi.grid_w = g.sampling_ratio > 0 ? g.sampling_ratio : adaptive(roi.bin_w);
  roi.step_h = roi.grid_h > 0 ? roi.bin_h / static_cast<Acc>(roi.grid_h) : Acc(0);
  roi.step_w = roi.grid_w > 0 ? roi.bin_w / static_cast<Acc>(roi.grid_w) : Acc(0);
  roi.count = static_cast<Acc>(std::max<std::int64_t>(roi.grid_h * roi.grid_w, 1));
  return roi;
}

// Four plane offsets and weights of one bilinear sample; valid = false: it reads nothing.
template <typename Acc>
struct Sample {
  bool valid = false;
  std::int64_t o1 = 0, o2 = 0, o3 = 0, o4 = 0;
  Acc w1 = 0, w2 = 0, w3 = 0, w4 = 0;
};

template <typename Acc>
Sample<Acc> bilinear(std::int64_t height, std::int64_t width, Acc y, Acc x) {
  Sample<Acc> s;
  if (!(y >= Acc(-1) && y <= static_cast<Acc>(height) && x >= Acc(-1) && x <= static_cast<Acc>(width))) return s;
  y = std::max(y, Acc(0));
  x = std::max(x, Acc(0));
  std::int64_t y_lo = static_cast<std::int64_t>(y);
  std::int64_t x_lo = static_cast<std::int64_t>(x);
  std::int64_t y_hi = y_lo + 1;
  std::int64_t x_hi = x_lo + 1;
  if (y_lo >= height - 1) {
    y_lo = y_hi = height - 1;
    y = static_cast<Acc>(y_lo);
  }
  if (x_lo >= width - 1) {
    x_lo = x_hi = width - 1;
    x = static_cast<Acc>(x_lo);
  }
  const Acc ly = y - static_cast<Acc>(y_lo);
  const Acc lx = x - static_cast<Acc>(x_lo);
  const Acc hy = Acc(1) - ly;
  const Acc hx = Acc(1) - lx;
  s.valid = true;
  s.o1 = y_lo * width + x_lo;
  s.o2 = y_lo * width + x_hi;
  s.o3 = y_hi * width + x_lo;
  s.o4 = y_hi * width + x_hi;
  s.w1 = hy * hx;
  s.w2 = hy * lx;
  s.w3 = ly * hx;
  s.w4 = ly * lx;
  return s;
}

// Calls f(bin, sample) for every bin (ph * PW + pw) and sample of the roi, in the order
// torchvision sums them (iy, then ix).
template <typename Acc, typename F>
void for_each_sample(const Roi<Acc>& roi, const RoiAlignGeometry& g, F&& f) {
  for (std::int64_t ph = 0; ph < g.pooled_height; ++ph) {
    for (std::int64_t pw = 0; pw < g.pooled_width; ++pw) {
      const std::int64_t bin = ph * g.pooled_width + pw;
      for (std::int64_t iy = 0; iy < roi.grid_h; ++iy) {
        const Acc y = roi.y0 + static_cast<Acc>(ph) * roi.bin_h + (static_cast<Acc>(iy) + Acc(0.5)) * roi.step_h;
        for (std::int64_t ix = 0; ix < roi.grid_w; ++ix) {
          const Acc x = roi.x0 + static_cast<Acc>(pw) * roi.bin_w + (static_cast<Acc>(ix) + Acc(0.5)) * roi.step_w;
          f(bin, bilinear(g.height, g.width, y, x));
        }
      }
    }
  }
}

// Channels per backward chunk for float16/bfloat16 (float32 scratch of chunk * H * W).
constexpr std::int64_t kScratchFloats = std::int64_t{1} << 20;

}  // namespace roi_align_cpu
using namespace roi_align_cpu;

std::int64_t roi_align_first_bad_roi_cpu(ScalarKind kind, const void* rois, std::int64_t num_rois,
                                         std::int64_t batch) {
  return cpu::dispatch_float_kinds(static_cast<int>(kind), [&]<typename T>() -> std::int64_t {
    using C = cpu::Convert<T>;
    const T* r = static_cast<const T*>(rois);
    for (std::int64_t k = 0; k < num_rois; ++k) {
      if (!batch_index_valid(C::load(r[k * 5]), batch)) return k;
    }
    return -1;
  });
}

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
    for (std::int64_t k = begin / g.channels; k * g.channels < end; ++k) {
      const std::int64_t c_begin = std::max(begin, k * g.channels) - k * g.channels;
      const std::int64_t c_end = std::min(end, (k + 1) * g.channels) - k * g.channels;
      const std::int64_t nc = c_end - c_begin;
      T* out_k = out + (k * g.channels + c_begin) * bins;
      const Roi<Acc> roi = load_roi<T, Acc>(r + k * 5, g);
      if (!roi.valid) {
        std::fill(out_k, out_k + nc * bins, C::store(Acc(0)));
        continue;
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
    }
  });
}

void roi_align_backward_cpu(ScalarKind kind, const RoiAlignGeometry& g, const void* grad_output, const void* rois,
                            void* grad_input, std::int64_t begin, std::int64_t end) {
  if (begin >= end || g.channels <= 0) return;
  cpu::dispatch_float_kinds(static_cast<int>(kind), [&]<typename T>() {
    using C = cpu::Convert<T>;
    using Acc = decltype(C::load(T{}));
    // float32/float64 add straight into grad_input; float16/bfloat16 into float32 scratch.
    constexpr bool kDirect = std::is_same_v<T, Acc>;
    const T* go = static_cast<const T*>(grad_output);
    const T* r = static_cast<const T*>(rois);
    T* gi = static_cast<T*>(grad_input);
    const std::int64_t plane_in = g.height * g.width;
    const std::int64_t bins = g.pooled_height * g.pooled_width;
    const std::int64_t chunk =
        kDirect ? g.channels : std::max<std::int64_t>(1, kScratchFloats / std::max<std::int64_t>(plane_in, 1));
    std::vector<Acc> scratch;
    std::vector<Roi<Acc>> batch_rois;
    std::vector<std::int64_t> batch_roi_ids;
    for (std::int64_t b = begin / g.channels; b * g.channels < end; ++b) {
      const std::int64_t b_c_begin = std::max(begin, b * g.channels) - b * g.channels;
      const std::int64_t b_c_end = std::min(end, (b + 1) * g.channels) - b * g.channels;
      batch_rois.clear();
      batch_roi_ids.clear();
      for (std::int64_t k = 0; k < g.rois; ++k) {
        const Roi<Acc> roi = load_roi<T, Acc>(r + k * 5, g);
        if (roi.valid && roi.batch == b) {
          batch_rois.push_back(roi);
          batch_roi_ids.push_back(k);
        }
      }
      for (std::int64_t c_begin = b_c_begin; c_begin < b_c_end; c_begin += chunk) {
        const std::int64_t nc = std::min(chunk, b_c_end - c_begin);
        T* gi_c = gi + (b * g.channels + c_begin) * plane_in;
        Acc* target = nullptr;
        if constexpr (kDirect) {
          target = gi_c;
          std::fill(gi_c, gi_c + nc * plane_in, Acc(0));
        } else {
          scratch.assign(static_cast<std::size_t>(nc * plane_in), Acc(0));
          target = scratch.data();
        }
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
        if constexpr (!kDirect) {
          for (std::int64_t i = 0; i < nc * plane_in; ++i) gi_c[i] = C::store(scratch[i]);
        }
      }
    }
  });
}

}  // namespace opkiln::kernels
