// IEEE fp16 and bfloat16 <-> fp32 conversions for the CPU kernels, with
// round-to-nearest-even and NaN preserved (the same results as c10::Half and
// c10::BFloat16), so CPU cores need no torch header.
#pragma once

#include <cstdint>
#include <cstring>

namespace opkiln::kernels::cpu {

struct Half { std::uint16_t bits; };
struct BFloat16 { std::uint16_t bits; };

inline float bits_to_float(std::uint32_t u) { float f; std::memcpy(&f, &u, sizeof f); return f; }
inline std::uint32_t float_to_bits(float f) { std::uint32_t u; std::memcpy(&u, &f, sizeof u); return u; }

inline float to_float(BFloat16 v) { return bits_to_float(static_cast<std::uint32_t>(v.bits) << 16); }

inline BFloat16 to_bfloat16(float f) {
  std::uint32_t u = float_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return BFloat16{0x7fc0};
  std::uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);
  return BFloat16{static_cast<std::uint16_t>((u + rounding_bias) >> 16)};
}

inline float to_float(Half h) {
  const std::uint32_t w = static_cast<std::uint32_t>(h.bits) << 16;
  const std::uint32_t sign = w & 0x80000000u;
  const std::uint32_t two_w = w + w;
  const std::uint32_t exp_offset = 0xE0u << 23;
  const float exp_scale = bits_to_float(0x7800000u);
  const float normalized = bits_to_float((two_w >> 4) + exp_offset) * exp_scale;
  const std::uint32_t magic_mask = 126u << 23;
  const float magic_bias = 0.5f;
  const float denormalized = bits_to_float((two_w >> 17) | magic_mask) - magic_bias;
  const std::uint32_t denormalized_cutoff = 1u << 27;
  const std::uint32_t result =
      sign | (two_w < denormalized_cutoff ? float_to_bits(denormalized) : float_to_bits(normalized));
  return bits_to_float(result);
}

inline Half to_half(float f) {
  const float scale_to_inf = bits_to_float(0x77800000u);
  const float scale_to_zero = bits_to_float(0x08800000u);
  float base = (f < 0 ? -f : f) * scale_to_inf * scale_to_zero;
  const std::uint32_t w = float_to_bits(f);
  const std::uint32_t shl1_w = w + w;
  const std::uint32_t sign = w & 0x80000000u;
  std::uint32_t bias = shl1_w & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = bits_to_float((bias >> 1) + 0x07800000u) + base;
  const std::uint32_t bits = float_to_bits(base);
  const std::uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
  const std::uint32_t mantissa_bits = bits & 0x00000FFFu;
  const std::uint32_t nonsign = exp_bits + mantissa_bits;
  return Half{static_cast<std::uint16_t>((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign))};
}

// Load/store helpers: compute in `Acc` (float or double), store in T.
template <typename T> struct Convert {
  static float load(T v) { return static_cast<float>(v); }
  static T store(float v) { return static_cast<T>(v); }
};
template <> struct Convert<double> {
  static double load(double v) { return v; }
  static double store(double v) { return v; }
};
template <> struct Convert<Half> {
  static float load(Half v) { return to_float(v); }
  static Half store(float v) { return to_half(v); }
};
template <> struct Convert<BFloat16> {
  static float load(BFloat16 v) { return to_float(v); }
  static BFloat16 store(float v) { return to_bfloat16(v); }
};

// Call f.template operator()<T>() with T the storage type of `kind`.
template <typename F>
decltype(auto) dispatch_float_kinds(int kind, F&& f) {
  switch (kind) {
    case 0: return f.template operator()<float>();
    case 1: return f.template operator()<double>();
    case 2: return f.template operator()<Half>();
    default: return f.template operator()<BFloat16>();
  }
}

}  // namespace opkiln::kernels::cpu
