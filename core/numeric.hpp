// Exact host conversions between float and the low-precision formats of core::DType.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

#include "core/dtype.hpp"

namespace crucible::core {

// Decoding (low precision -> float) is exact for every bit pattern: each of these formats is a
// subset of float. The decoders are constexpr (so fp8 lookup tables can be built at compile
// time) and inline, because the output comparison calls them once per element over tens of
// millions of elements.
//
// Encoding (float -> low precision) rounds to nearest, ties to even, and treats specials as the
// CUDA conversions do:
//   bf16, f16: overflow rounds to +-inf; NaN stays NaN with its sign and the top bits of its
//     payload (a payload that would truncate to zero becomes the quiet bit, so the result is
//     never an infinity). Every bf16/f16 pattern survives decode-then-encode bit for bit.
//   fp8 e4m3 ("fn": no infinities, NaN = S.1111.111, largest finite 448) and fp8 e5m2 (IEEE-like,
//     largest finite 57344): as __nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...): finite values
//     and infinities beyond the largest finite saturate to +-largest finite; NaN becomes
//     S.1111.111 (e4m3) or S.11111.1x (e5m2, x = the second payload bit of the float NaN);
//     signs of zeros are kept.
// All functions are pure and thread-safe.

constexpr float bf16_to_float(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

constexpr float f16_to_float(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1Fu;
  const std::uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  if (exponent == 0) {
    // Subnormal: mantissa * 2^-24, exact in float (the product is a float normal).
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign != 0 ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

constexpr float fp8_e4m3_to_float(std::uint8_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x80u) << 24;
  const std::uint32_t exponent = (bits >> 3) & 0xFu;
  const std::uint32_t mantissa = bits & 0x7u;
  if (exponent == 0xF && mantissa == 0x7) return std::bit_cast<float>(sign | 0x7FF00000u);
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * 0x1p-9f;
    return sign != 0 ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 120u) << 23) | (mantissa << 20));
}

constexpr float fp8_e5m2_to_float(std::uint8_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x80u) << 24;
  const std::uint32_t exponent = (bits >> 2) & 0x1Fu;
  const std::uint32_t mantissa = bits & 0x3u;
  if (exponent == 0x1F) {
    // Infinity (zero mantissa) or NaN: the two mantissa bits become the top of the float's.
    return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 21));
  }
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * 0x1p-16f;
    return sign != 0 ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 21));
}

std::uint16_t float_to_bf16(float value);
std::uint16_t float_to_f16(float value);
std::uint8_t float_to_fp8_e4m3(float value);
std::uint8_t float_to_fp8_e5m2(float value);

// Element `index` of a host array of `dtype` as a double: exact for every type but i64 beyond
// 2^53 (rounded to nearest). bool reads one byte; any non-zero byte is 1. `data` must hold at
// least index + 1 elements and needs no particular alignment.
double element_as_double(DType dtype, const void* data, std::size_t index);

}  // namespace crucible::core
