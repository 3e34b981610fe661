// Bilinear sampling, the math every sampling op shares (the RoI family's roi_align and
// ps_roi_align, deform_conv2d): a sample's four taps (plane offsets and weights), the
// weighted mean it reads, the adjoint it scatters, and the slope of its value in y and x.
// Where a sample lies and what an out-of-plane tap reads is each rule's own:
//   - clamped (roi_sampling::bilinear, torchvision's RoI ops): coordinates clamped into the plane;
//   - zero_padded (below, torchvision's deform_conv2d): a tap outside the plane reads 0.
// Plain C++; host/device qualified under nvcc.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/host_device.h"

namespace opkiln::kernels::bilinear {

// Four plane offsets and weights of one bilinear sample; valid = false: it reads nothing.
template <typename Acc>
struct Sample {
  bool valid = false;
  std::int64_t o1 = 0, o2 = 0, o3 = 0, o4 = 0;
  Acc w1 = 0, w2 = 0, w3 = 0, w4 = 0;
};

// The taps' weights from the fractional parts ly, lx of the sample's position:
// (y_lo, x_lo), (y_lo, x_hi), (y_hi, x_lo), (y_hi, x_hi).
template <typename Acc>
OPKILN_HD void set_weights(Sample<Acc>& s, Acc ly, Acc lx) {
  const Acc hy = Acc(1) - ly;
  const Acc hx = Acc(1) - lx;
  s.w1 = hy * hx;
  s.w2 = hy * lx;
  s.w3 = ly * hx;
  s.w4 = ly * lx;
}

// The sample's value: its taps' weighted sum; load(offset) reads the plane.
template <typename Acc, typename Load>
OPKILN_HD Acc value(const Sample<Acc>& s, Load&& load) {
  return s.w1 * load(s.o1) + s.w2 * load(s.o2) + s.w3 * load(s.o3) + s.w4 * load(s.o4);
}

// The adjoint of value: grad spread over the taps; add(offset, amount) accumulates.
template <typename Acc, typename Add>
OPKILN_HD void scatter(const Sample<Acc>& s, Acc grad, Add&& add) {
  add(s.o1, grad * s.w1);
  add(s.o2, grad * s.w2);
  add(s.o3, grad * s.w3);
  add(s.o4, grad * s.w4);
}

// A zero-padded sample and the slope of its value: d value / dy = sum dy_k * tap_k, d / dx likewise.
template <typename Acc>
struct PaddedSample {
  Sample<Acc> sample;
  Acc dy1 = 0, dy2 = 0, dy3 = 0, dy4 = 0, dx1 = 0, dx2 = 0, dx3 = 0, dx4 = 0;
};

// torchvision's deform_conv2d rule: the value is 0 unless -1 < y < height and -1 < x < width
// (NaN: 0); a tap outside the plane reads 0 (its weight is 0). The slope is taken at any position
// from the taps inside the plane (torchvision's get_coordinate_weight): it is not zeroed with the
// value at exactly y = -1 or x = -1. A tap outside the plane has offset kOutside.
// The offset of a zero-padded tap outside the plane: its load must read 0 (padded_load), so that
// an infinite or NaN value elsewhere in the plane never meets its zero weight.
constexpr std::int64_t kOutside = -1;

template <typename T, typename Convert>
OPKILN_HD auto padded_load(const T* plane, std::int64_t o, Convert&& convert) -> decltype(convert(plane[0])) {
  return o == kOutside ? decltype(convert(plane[0]))(0) : convert(plane[o]);
}

template <typename Acc>
OPKILN_HD PaddedSample<Acc> zero_padded(std::int64_t height, std::int64_t width, Acc y, Acc x) {
  PaddedSample<Acc> r;
  r.sample.o1 = r.sample.o2 = r.sample.o3 = r.sample.o4 = kOutside;
  // Beyond these no tap is inside the plane (and floor's int cast stays defined).
  if (!(y > Acc(-2) && y < static_cast<Acc>(height + 1) && x > Acc(-2) && x < static_cast<Acc>(width + 1))) return r;
  const Acc fy = std::floor(y);
  const Acc fx = std::floor(x);
  const std::int64_t y_lo = static_cast<std::int64_t>(fy);
  const std::int64_t x_lo = static_cast<std::int64_t>(fx);
  const Acc ly = y - fy;
  const Acc lx = x - fx;
  const bool in_y_lo = y_lo >= 0 && y_lo < height, in_y_hi = y_lo + 1 >= 0 && y_lo + 1 < height;
  const bool in_x_lo = x_lo >= 0 && x_lo < width, in_x_hi = x_lo + 1 >= 0 && x_lo + 1 < width;
  const bool in1 = in_y_lo && in_x_lo, in2 = in_y_lo && in_x_hi, in3 = in_y_hi && in_x_lo, in4 = in_y_hi && in_x_hi;
  Sample<Acc>& s = r.sample;
  s.o1 = in1 ? y_lo * width + x_lo : kOutside;
  s.o2 = in2 ? y_lo * width + x_lo + 1 : kOutside;
  s.o3 = in3 ? (y_lo + 1) * width + x_lo : kOutside;
  s.o4 = in4 ? (y_lo + 1) * width + x_lo + 1 : kOutside;
  const Acc hy = Acc(1) - ly;
  const Acc hx = Acc(1) - lx;
  r.dy1 = in1 ? -hx : Acc(0);
  r.dy2 = in2 ? -lx : Acc(0);
  r.dy3 = in3 ? hx : Acc(0);
  r.dy4 = in4 ? lx : Acc(0);
  r.dx1 = in1 ? -hy : Acc(0);
  r.dx2 = in2 ? hy : Acc(0);
  r.dx3 = in3 ? -ly : Acc(0);
  r.dx4 = in4 ? ly : Acc(0);
  if (!(y > Acc(-1) && y < static_cast<Acc>(height) && x > Acc(-1) && x < static_cast<Acc>(width))) return r;
  s.valid = true;
  set_weights(s, ly, lx);
  if (!in1) s.w1 = 0;
  if (!in2) s.w2 = 0;
  if (!in3) s.w3 = 0;
  if (!in4) s.w4 = 0;
  return r;
}

}  // namespace opkiln::kernels::bilinear
