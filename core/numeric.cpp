// Float-to-low-precision rounding (nearest, ties to even) and element reads by dtype.
#include "core/numeric.hpp"

#include <algorithm>
#include <cstring>

#include "core/result.hpp"

namespace crucible::core {
namespace {

// Rounds the magnitude of a finite float (sign bit clear) to an IEEE-style binary format with
// kExponentBits exponent bits (bias 2^(e-1) - 1) and kMantissaBits stored mantissa bits.
// Returns the magnitude's encoding without an upper bound: a result at or past the format's
// top exponent is the caller's overflow to resolve. A carry out of the mantissa moves into the
// exponent field by plain addition, which is exactly the next binade (or subnormal -> normal).
template <int kExponentBits, int kMantissaBits>
std::uint32_t round_magnitude(std::uint32_t abs_bits) {
  constexpr int kBias = (1 << (kExponentBits - 1)) - 1;
  constexpr int kMinNormalExponent = 1 - kBias;
  const int field = static_cast<int>(abs_bits >> 23);
  const std::uint64_t fraction = abs_bits & 0x7FFFFFu;
  // value = significand * 2^(exponent - 23)
  const std::uint64_t significand = field == 0 ? fraction : (fraction | 0x800000u);
  const int exponent = field == 0 ? -126 : field - 127;
  // Below the target's normal range the exponent is pinned and the significand loses more bits.
  const int target_exponent = std::max(exponent, kMinNormalExponent);
  const int shift = (23 - kMantissaBits) + (target_exponent - exponent);
  // significand < 2^24, so from a shift of 25 on it is below half the smallest subnormal.
  if (shift > 25) return 0;
  const std::uint64_t kept = significand >> shift;
  const std::uint64_t rest = significand & ((std::uint64_t{1} << shift) - 1);
  const std::uint64_t half = std::uint64_t{1} << (shift - 1);
  // For normals `kept` carries the implicit bit at 2^kMantissaBits, which adds the missing 1
  // to the biased exponent; for subnormals the exponent field is 0 and `kept` has no such bit.
  std::uint32_t result =
      (static_cast<std::uint32_t>(target_exponent + kBias - 1) << kMantissaBits) +
      static_cast<std::uint32_t>(kept);
  if (rest > half || (rest == half && (result & 1u) != 0)) ++result;
  return result;
}

constexpr std::uint32_t kFloatAbsMask = 0x7FFFFFFFu;
constexpr std::uint32_t kFloatInf = 0x7F800000u;

template <class T>
T load(const void* data, std::size_t index) {
  T value;
  std::memcpy(&value, static_cast<const unsigned char*>(data) + index * sizeof(T), sizeof(T));
  return value;
}

}  // namespace

std::uint16_t float_to_bf16(float value) {
  const auto bits = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t magnitude = bits & kFloatAbsMask;
  if (magnitude > kFloatInf) {
    auto nan = static_cast<std::uint16_t>(bits >> 16);
    if ((nan & 0x7Fu) == 0) nan |= 0x40u;  // truncated payload: keep it a NaN, not an infinity
    return nan;
  }
  if (magnitude == kFloatInf) return static_cast<std::uint16_t>(sign | 0x7F80u);
  const std::uint32_t rounded = std::min<std::uint32_t>(round_magnitude<8, 7>(magnitude), 0x7F80u);
  return static_cast<std::uint16_t>(sign | rounded);
}

std::uint16_t float_to_f16(float value) {
  const auto bits = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t magnitude = bits & kFloatAbsMask;
  if (magnitude > kFloatInf) {
    std::uint32_t payload = (magnitude >> 13) & 0x3FFu;
    if (payload == 0) payload = 0x200u;
    return static_cast<std::uint16_t>(sign | 0x7C00u | payload);
  }
  if (magnitude == kFloatInf) return static_cast<std::uint16_t>(sign | 0x7C00u);
  const std::uint32_t rounded = std::min<std::uint32_t>(round_magnitude<5, 10>(magnitude), 0x7C00u);
  return static_cast<std::uint16_t>(sign | rounded);
}

std::uint8_t float_to_fp8_e4m3(float value) {
  const auto bits = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint8_t>((bits >> 24) & 0x80u);
  const std::uint32_t magnitude = bits & kFloatAbsMask;
  constexpr std::uint32_t kMaxFinite = 0x7Eu;  // 448
  if (magnitude > kFloatInf) return static_cast<std::uint8_t>(sign | 0x7Fu);
  // Rounding is monotone, so saturating the rounded magnitude equals saturating the input; the
  // only pattern above 0x7E within the exponent range is the NaN 0x7F, which is never produced.
  const std::uint32_t rounded =
      magnitude == kFloatInf ? kMaxFinite : round_magnitude<4, 3>(magnitude);
  return static_cast<std::uint8_t>(sign | std::min(rounded, kMaxFinite));
}

std::uint8_t float_to_fp8_e5m2(float value) {
  const auto bits = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint8_t>((bits >> 24) & 0x80u);
  const std::uint32_t magnitude = bits & kFloatAbsMask;
  constexpr std::uint32_t kMaxFinite = 0x7Bu;  // 57344
  if (magnitude > kFloatInf) {
    // CUDA widens to double first, which sets the quiet bit; the second payload bit survives.
    return static_cast<std::uint8_t>(sign | 0x7Eu | ((bits >> 21) & 1u));
  }
  const std::uint32_t rounded =
      magnitude == kFloatInf ? kMaxFinite : round_magnitude<5, 2>(magnitude);
  return static_cast<std::uint8_t>(sign | std::min(rounded, kMaxFinite));
}

double element_as_double(DType dtype, const void* data, std::size_t index) {
  switch (dtype) {
    case DType::kBF16:
      return bf16_to_float(load<std::uint16_t>(data, index));
    case DType::kF16:
      return f16_to_float(load<std::uint16_t>(data, index));
    case DType::kF32:
      return load<float>(data, index);
    case DType::kF64:
      return load<double>(data, index);
    case DType::kFP8E4M3:
      return fp8_e4m3_to_float(load<std::uint8_t>(data, index));
    case DType::kFP8E5M2:
      return fp8_e5m2_to_float(load<std::uint8_t>(data, index));
    case DType::kI8:
      return load<std::int8_t>(data, index);
    case DType::kU8:
      return load<std::uint8_t>(data, index);
    case DType::kI16:
      return load<std::int16_t>(data, index);
    case DType::kI32:
      return load<std::int32_t>(data, index);
    case DType::kI64:
      return static_cast<double>(load<std::int64_t>(data, index));
    case DType::kBool:
      return load<std::uint8_t>(data, index) != 0 ? 1.0 : 0.0;
  }
  throw InternalError("element_as_double: unknown dtype");
}

}  // namespace crucible::core
