// deform_conv2d's CPU kernel core (deform_conv2d.h): loops over the block, sampling with
// common/bilinear.h. A sample's taps are found once per (image, offset group, tap, position)
// in the sample table and read for every channel of the offset group.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/half_float.h"
#include "deform_conv2d/deform_conv2d.h"

namespace opkiln::kernels {
namespace {

using cpu::Convert;
using cpu::dispatch_float_kinds;

template <typename T>
using AccOf = decltype(Convert<T>::load(T{}));

template <typename T>
auto loader() {
  return [](T v) { return Convert<T>::load(v); };
}

}  // namespace

void deform_samples_cpu(ScalarKind kind, const void* offset, const void* mask, const DeformGeometry& g, void* table,
                        std::int64_t begin, std::int64_t end) {
  dispatch_float_kinds(static_cast<int>(kind), [&]<typename T>() {
    using Acc = AccOf<T>;
    auto* out = static_cast<bilinear::Sample<Acc>*>(table);
    const std::int64_t positions = g.positions();
    for (std::int64_t row = begin; row < end; ++row) {
      for (std::int64_t p = 0; p < positions; ++p) {
        const auto pt = deform::point<Acc>(g, static_cast<const T*>(offset), static_cast<const T*>(mask), row, p,
                                           loader<T>());
        out[row * positions + p] =
            deform::masked(bilinear::zero_padded<Acc>(g.height, g.width, pt.y, pt.x).sample, pt.mask);
      }
    }
  });
}

void deform_im2col_cpu(ScalarKind kind, const void* input, const void* table, const DeformGeometry& g, void* columns,
                       std::int64_t begin, std::int64_t end) {
  dispatch_float_kinds(static_cast<int>(kind), [&]<typename T>() {
    using Acc = AccOf<T>;
    const auto* samples = static_cast<const bilinear::Sample<Acc>*>(table);
    const std::int64_t positions = g.positions(), taps = g.taps();
    for (std::int64_t nc = begin; nc < end; ++nc) {
      const std::int64_t n = nc / g.channels, c = nc % g.channels;
      const T* plane = static_cast<const T*>(input) + nc * g.plane();
      const auto load = [plane](std::int64_t o) { return bilinear::padded_load(plane, o, Convert<T>::load); };
      T* col = static_cast<T*>(columns) + nc * taps * positions;
      const bilinear::Sample<Acc>* rows = samples + (n * g.offset_groups + c / g.group_channels()) * taps * positions;
      for (std::int64_t i = 0; i < taps * positions; ++i) col[i] = Convert<T>::store(rows[i].valid ? bilinear::value(rows[i], load) : Acc(0));
    }
  });
}

void deform_col2im_cpu(ScalarKind kind, const void* grad_columns, const void* table, const DeformGeometry& g,
                       void* grad_input, std::int64_t begin, std::int64_t end) {
  dispatch_float_kinds(static_cast<int>(kind), [&]<typename T>() {
    using Acc = AccOf<T>;
    const auto* samples = static_cast<const bilinear::Sample<Acc>*>(table);
    const std::int64_t positions = g.positions(), taps = g.taps();
    std::vector<Acc> acc(static_cast<std::size_t>(g.plane()));
    for (std::int64_t nc = begin; nc < end; ++nc) {
      const std::int64_t n = nc / g.channels, c = nc % g.channels;
      std::fill(acc.begin(), acc.end(), Acc(0));
      const auto add = [&acc](std::int64_t o, Acc v) {
        if (o != bilinear::kOutside) acc[static_cast<std::size_t>(o)] += v;
      };
      const T* col = static_cast<const T*>(grad_columns) + nc * taps * positions;
      const bilinear::Sample<Acc>* rows = samples + (n * g.offset_groups + c / g.group_channels()) * taps * positions;
      for (std::int64_t i = 0; i < taps * positions; ++i) {
        if (rows[i].valid) bilinear::scatter(rows[i], Convert<T>::load(col[i]), add);
      }
      T* plane = static_cast<T*>(grad_input) + nc * g.plane();
      for (std::int64_t o = 0; o < g.plane(); ++o) plane[o] = Convert<T>::store(acc[static_cast<std::size_t>(o)]);
    }
  });
}

void deform_offset_grad_cpu(ScalarKind kind, const void* grad_columns, const void* input, const void* offset,
                            const void* mask, const DeformGeometry& g, void* grad_offset, void* grad_mask,
                            std::int64_t begin, std::int64_t end) {
  dispatch_float_kinds(static_cast<int>(kind), [&]<typename T>() {
    using Acc = AccOf<T>;
    const std::int64_t positions = g.positions(), taps = g.taps(), group = g.group_channels();
    std::vector<bilinear::PaddedSample<Acc>> at(static_cast<std::size_t>(positions));
    std::vector<Acc> mask_at(static_cast<std::size_t>(positions));
    std::vector<Acc> gy(static_cast<std::size_t>(positions)), gx(gy.size()), gm(gy.size());
    const auto load = [](const T* plane, std::int64_t o) { return bilinear::padded_load(plane, o, Convert<T>::load); };
    for (std::int64_t row = begin; row < end; ++row) {
      const std::int64_t t = row % taps, n_og = row / taps;
      const std::int64_t n = n_og / g.offset_groups, og = n_og % g.offset_groups;
      for (std::int64_t p = 0; p < positions; ++p) {
        const auto pt = deform::point<Acc>(g, static_cast<const T*>(offset), static_cast<const T*>(mask), row, p,
                                           loader<T>());
        at[static_cast<std::size_t>(p)] = bilinear::zero_padded<Acc>(g.height, g.width, pt.y, pt.x);
        mask_at[static_cast<std::size_t>(p)] = pt.mask;
      }
      std::fill(gy.begin(), gy.end(), Acc(0));
      std::fill(gx.begin(), gx.end(), Acc(0));
      std::fill(gm.begin(), gm.end(), Acc(0));
      for (std::int64_t c = og * group; c < (og + 1) * group; ++c) {
        const T* plane = static_cast<const T*>(input) + (n * g.channels + c) * g.plane();
        const T* col = static_cast<const T*>(grad_columns) + ((n * g.channels + c) * taps + t) * positions;
        for (std::int64_t p = 0; p < positions; ++p) {
          const auto& s = at[static_cast<std::size_t>(p)];
          const Acc v1 = load(plane, s.sample.o1), v2 = load(plane, s.sample.o2);
          const Acc v3 = load(plane, s.sample.o3), v4 = load(plane, s.sample.o4);
          const Acc grad = Convert<T>::load(col[p]);
          gy[static_cast<std::size_t>(p)] += grad * (s.dy1 * v1 + s.dy2 * v2 + s.dy3 * v3 + s.dy4 * v4);
          gx[static_cast<std::size_t>(p)] += grad * (s.dx1 * v1 + s.dx2 * v2 + s.dx3 * v3 + s.dx4 * v4);
          if (g.use_mask && s.sample.valid) {
            gm[static_cast<std::size_t>(p)] +=
                grad * (s.sample.w1 * v1 + s.sample.w2 * v2 + s.sample.w3 * v3 + s.sample.w4 * v4);
          }
        }
      }
      T* go = static_cast<T*>(grad_offset) + (n * 2 * g.offset_groups * taps + 2 * (og * taps + t)) * positions;
      for (std::int64_t p = 0; p < positions; ++p) {
        const Acc m = mask_at[static_cast<std::size_t>(p)];
        go[p] = Convert<T>::store(m * gy[static_cast<std::size_t>(p)]);
        go[positions + p] = Convert<T>::store(m * gx[static_cast<std::size_t>(p)]);
      }
      if (g.use_mask) {
        T* gmask = static_cast<T*>(grad_mask) + row * positions;
        for (std::int64_t p = 0; p < positions; ++p) gmask[p] = Convert<T>::store(gm[static_cast<std::size_t>(p)]);
      }
    }
  });
}

void deform_add_bias_cpu(ScalarKind kind, const void* src, const void* bias, std::int64_t channels,
                         std::int64_t plane, void* out, std::int64_t begin, std::int64_t end) {
  dispatch_float_kinds(static_cast<int>(kind), [&]<typename T>() {
    using Acc = AccOf<T>;
    for (std::int64_t k = begin; k < end; ++k) {
      const Acc b = bias != nullptr ? Convert<T>::load(static_cast<const T*>(bias)[k % channels]) : Acc(0);
      const T* s = static_cast<const T*>(src) + k * plane;
      T* o = static_cast<T*>(out) + k * plane;
      for (std::int64_t i = 0; i < plane; ++i) o[i] = Convert<T>::store(Convert<T>::load(s[i]) + b);
    }
  });
}

void deform_sum_cpu(ScalarKind kind, const void* src, std::int64_t count, std::int64_t n, bool accumulate, void* dst,
                    std::int64_t begin, std::int64_t end) {
  dispatch_float_kinds(static_cast<int>(kind), [&]<typename T>() {
    using Acc = AccOf<T>;
    const T* s = static_cast<const T*>(src);
    T* d = static_cast<T*>(dst);
    for (std::int64_t j = begin; j < end; ++j) {
      Acc sum = accumulate ? Convert<T>::load(d[j]) : Acc(0);
      for (std::int64_t i = 0; i < count; ++i) sum += Convert<T>::load(s[i * n + j]);
      d[j] = Convert<T>::store(sum);
    }
  });
}

void deform_bias_grad_cpu(ScalarKind kind, const void* grad, std::int64_t batch, std::int64_t channels,
                          std::int64_t plane, bool accumulate, void* grad_bias, std::int64_t begin, std::int64_t end) {
  dispatch_float_kinds(static_cast<int>(kind), [&]<typename T>() {
    using Acc = AccOf<T>;
    T* d = static_cast<T*>(grad_bias);
    for (std::int64_t c = begin; c < end; ++c) {
      Acc sum = accumulate ? Convert<T>::load(d[c]) : Acc(0);
      for (std::int64_t n = 0; n < batch; ++n) {
        const T* g = static_cast<const T*>(grad) + (n * channels + c) * plane;
        for (std::int64_t i = 0; i < plane; ++i) sum += Convert<T>::load(g[i]);
      }
      d[c] = Convert<T>::store(sum);
    }
  });
}

}  // namespace opkiln::kernels
