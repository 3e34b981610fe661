// The IoU test and the score sort key of NMS, shared by the CPU and CUDA
// cores so that both decide every borderline case identically. Plain C++;
// host/device qualified under nvcc.
#pragma once

#include <cstdint>
#include <cstring>

#include "common/host_device.h"

namespace opkiln::kernels::nms_detail {

// Multiplication that nvcc may not contract into an FMA with a neighbouring
// add: the CPU kernel rounds the product, and so must the GPU.
OPKILN_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
OPKILN_HD double mul_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

template <typename A>
OPKILN_HD A max_of(A a, A b) { return a < b ? b : a; }
template <typename A>
OPKILN_HD A min_of(A a, A b) { return b < a ? b : a; }

template <typename A>
OPKILN_HD A box_area(A x1, A y1, A x2, A y2) { return mul_rn(x2 - x1, y2 - y1); }

// True when box j must be suppressed by kept box i: IoU(i, j) > threshold.
// The operation order is torchvision's CPU kernel's:
//   inter / (area_i + area_j - inter), compared in double.
template <typename A>
OPKILN_HD A iou(A ix1, A iy1, A ix2, A iy2, A iarea, A jx1, A jy1, A jx2, A jy2, A jarea) {
  const A w = max_of(A(0), min_of(ix2, jx2) - max_of(ix1, jx1));
  const A h = max_of(A(0), min_of(iy2, jy2) - max_of(iy1, jy1));
  const A inter = mul_rn(w, h);
  return inter / (iarea + jarea - inter);
}

template <typename A>
OPKILN_HD bool iou_above(A ix1, A iy1, A ix2, A iy2, A iarea, A jx1, A jy1, A jx2, A jy2, A jarea,
                         double threshold) {
  return static_cast<double>(iou(ix1, iy1, ix2, iy2, iarea, jx1, jy1, jx2, jy2, jarea)) > threshold;
}

// Sort keys: ascending key order == descending score, NaN first, -0 == +0.
OPKILN_HD std::uint32_t score_key(float s) {
  std::uint32_t u;
#if defined(__CUDA_ARCH__)
  u = __float_as_uint(s);
#else
  std::memcpy(&u, &s, sizeof u);
#endif
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0u;  // NaN: before everything
  if ((u << 1) == 0u) u = 0u;                       // -0.0 -> +0.0
  const std::uint32_t ordered = (u & 0x80000000u) ? ~u : (u | 0x80000000u);  // ascending in s
  return ~ordered;  // +inf -> 0x007fffff (> 0, after NaN), -inf -> 0xff800000
}

OPKILN_HD std::uint64_t score_key(double s) {
  std::uint64_t u;
#if defined(__CUDA_ARCH__)
  u = static_cast<std::uint64_t>(__double_as_longlong(s));
#else
  std::memcpy(&u, &s, sizeof u);
#endif
  if ((u & 0x7fffffffffffffffull) > 0x7ff0000000000000ull) return 0ull;
  if ((u << 1) == 0ull) u = 0ull;
  const std::uint64_t sign = 0x8000000000000000ull;
  const std::uint64_t ordered = (u & sign) ? ~u : (u | sign);
  return ~ordered;
}

}  // namespace opkiln::kernels::nms_detail
