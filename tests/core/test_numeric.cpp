// Low-precision float conversions: exhaustive decoding, round trips, ties to even, saturation.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/numeric.hpp"

using namespace crucible::core;

namespace {

// A binary format as its definition states it, decoded with ldexp: an oracle independent of the
// bit manipulation under test.
struct Format {
  const char* name;
  int exponent_bits;
  int mantissa_bits;
  bool ieee_specials;  // all-ones exponent = inf/NaN; otherwise only S.1..1.1..1 is NaN ("fn")
  double (*decode)(std::uint32_t);
  std::uint32_t (*encode)(float);
};

double decode_by_definition(std::uint32_t bits, const Format& format) {
  const int e = format.exponent_bits;
  const int m = format.mantissa_bits;
  const bool negative = ((bits >> (e + m)) & 1u) != 0;
  const std::uint32_t exponent = (bits >> m) & ((1u << e) - 1);
  const std::uint32_t mantissa = bits & ((1u << m) - 1);
  const int bias = (1 << (e - 1)) - 1;
  const std::uint32_t top = (1u << e) - 1;
  double value;
  if (format.ieee_specials && exponent == top) {
    value = mantissa == 0 ? std::numeric_limits<double>::infinity()
                          : std::numeric_limits<double>::quiet_NaN();
  } else if (!format.ieee_specials && exponent == top && mantissa == (1u << m) - 1) {
    value = std::numeric_limits<double>::quiet_NaN();
  } else if (exponent == 0) {
    value = std::ldexp(static_cast<double>(mantissa), 1 - bias - m);
  } else {
    value = std::ldexp(static_cast<double>((1u << m) + mantissa),
                       static_cast<int>(exponent) - bias - m);
  }
  return negative ? -value : value;
}

const Format kBF16{"bf16",
                   8,
                   7,
                   true,
                   [](std::uint32_t b) {
                     return static_cast<double>(bf16_to_float(static_cast<std::uint16_t>(b)));
                   },
                   [](float f) { return static_cast<std::uint32_t>(float_to_bf16(f)); }};
const Format kF16{"f16",
                  5,
                  10,
                  true,
                  [](std::uint32_t b) {
                    return static_cast<double>(f16_to_float(static_cast<std::uint16_t>(b)));
                  },
                  [](float f) { return static_cast<std::uint32_t>(float_to_f16(f)); }};
const Format kE4M3{"fp8_e4m3",
                   4,
                   3,
                   false,
                   [](std::uint32_t b) {
                     return static_cast<double>(fp8_e4m3_to_float(static_cast<std::uint8_t>(b)));
                   },
                   [](float f) { return static_cast<std::uint32_t>(float_to_fp8_e4m3(f)); }};
const Format kE5M2{"fp8_e5m2",
                   5,
                   2,
                   true,
                   [](std::uint32_t b) {
                     return static_cast<double>(fp8_e5m2_to_float(static_cast<std::uint8_t>(b)));
                   },
                   [](float f) { return static_cast<std::uint32_t>(float_to_fp8_e5m2(f)); }};
const Format* const kFormats[] = {&kBF16, &kF16, &kE4M3, &kE5M2};

std::uint32_t pattern_count(const Format& format) {
  return 1u << (1 + format.exponent_bits + format.mantissa_bits);
}

bool same_value(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

std::string hex(std::uint32_t bits) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%X", bits);
  return text;
}

}  // namespace

TEST_CASE("numeric: every bit pattern of every format decodes to its defined value") {
  for (const Format* format : kFormats) {
    const std::string name = format->name;
    CAPTURE(name);
    std::size_t failures = 0;
    std::string first_failure;
    for (std::uint32_t bits = 0; bits < pattern_count(*format); ++bits) {
      const double got = format->decode(bits);
      const double want = decode_by_definition(bits, *format);
      if (!same_value(got, want)) {
        if (failures++ == 0) first_failure = hex(bits);
      }
    }
    INFO("first failing pattern: " << first_failure);
    CHECK(failures == 0);
  }
}

TEST_CASE("numeric: every bf16 and f16 pattern survives decode then encode bit for bit") {
  for (const Format* format : {&kBF16, &kF16}) {
    const std::string name = format->name;
    CAPTURE(name);
    std::size_t failures = 0;
    std::string first_failure;
    for (std::uint32_t bits = 0; bits < 65536; ++bits) {
      // Through the decoder's float, not a double, so NaN payloads travel bit for bit.
      const auto pattern = static_cast<std::uint16_t>(bits);
      const float value = format == &kBF16 ? bf16_to_float(pattern) : f16_to_float(pattern);
      if (format->encode(value) != bits) {
        if (failures++ == 0) first_failure = hex(bits);
      }
    }
    INFO("first failing pattern: " << first_failure);
    CHECK(failures == 0);
  }
}

TEST_CASE("numeric: every finite fp8 pattern survives decode then encode") {
  // NaNs stay NaN with their sign; e5m2 infinities saturate to +-57344 (satfinite).
  struct Case {
    const char* name;
    float (*decode)(std::uint8_t);
    std::uint8_t (*encode)(float);
  };
  const Case cases[] = {{"fp8_e4m3", fp8_e4m3_to_float, float_to_fp8_e4m3},
                        {"fp8_e5m2", fp8_e5m2_to_float, float_to_fp8_e5m2}};
  for (const Case& c : cases) {
    const std::string name = c.name;
    CAPTURE(name);
    for (std::uint32_t bits = 0; bits < 256; ++bits) {
      CAPTURE(bits);
      const float value = c.decode(static_cast<std::uint8_t>(bits));
      const std::uint8_t back = c.encode(value);
      if (std::isnan(value)) {
        CHECK(std::isnan(c.decode(back)));
        CHECK((back & 0x80u) == (bits & 0x80u));
      } else if (std::isinf(value)) {
        CHECK(back == ((bits & 0x80u) | 0x7Bu));
      } else {
        CHECK(back == bits);
      }
    }
  }
}

TEST_CASE("numeric: fp8 spot values match the format definitions") {
  struct Case {
    const char* format;
    std::uint8_t bits;
    double value;  // NaN for NaN patterns
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const Case cases[] = {
      {"e4m3", 0x00, 0.0},
      {"e4m3", 0x01, 0x1p-9},      // smallest subnormal
      {"e4m3", 0x07, 7 * 0x1p-9},  // largest subnormal
      {"e4m3", 0x08, 0x1p-6},      // smallest normal
      {"e4m3", 0x38, 1.0},
      {"e4m3", 0x39, 1.125},
      {"e4m3", 0x77, 240.0},
      {"e4m3", 0x78, 256.0},  // exponent 1111 is finite in the fn variant
      {"e4m3", 0x7E, 448.0},  // largest finite
      {"e4m3", 0x7F, nan},    // the only NaN (and 0xFF)
      {"e4m3", 0xFE, -448.0},
      {"e4m3", 0xFF, nan},
      {"e4m3", 0xB8, -1.0},
      {"e5m2", 0x00, 0.0},
      {"e5m2", 0x01, 0x1p-16},  // smallest subnormal
      {"e5m2", 0x04, 0x1p-14},  // smallest normal
      {"e5m2", 0x3C, 1.0},
      {"e5m2", 0x3D, 1.25},
      {"e5m2", 0x7B, 57344.0},  // largest finite
      {"e5m2", 0x7C, inf},
      {"e5m2", 0x7D, nan},
      {"e5m2", 0x7E, nan},
      {"e5m2", 0x7F, nan},
      {"e5m2", 0xFC, -inf},
      {"e5m2", 0xBC, -1.0},
  };
  for (const Case& c : cases) {
    const std::string format = c.format;
    CAPTURE(format);
    CAPTURE(static_cast<int>(c.bits));
    const bool e4m3 = format == "e4m3";
    const double got = e4m3 ? fp8_e4m3_to_float(c.bits) : fp8_e5m2_to_float(c.bits);
    CHECK(same_value(got, c.value));
  }
  CHECK(std::signbit(fp8_e4m3_to_float(0x80)));
  CHECK(fp8_e4m3_to_float(0x80) == 0.0f);
}

TEST_CASE("numeric: encoding rounds to nearest with ties to even and saturates like CUDA") {
  struct Case {
    const char* format;
    float input;
    std::uint32_t bits;
  };
  const float inf = std::numeric_limits<float>::infinity();
  const float big = std::numeric_limits<float>::max();
  const Case cases[] = {
      // bf16: 8-bit significand, ulp at 1 is 2^-7.
      {"bf16", 1.0f, 0x3F80},
      {"bf16", 1.0f + 0x1p-8f, 0x3F80},             // tie -> even (down)
      {"bf16", 1.0f + 3 * 0x1p-8f, 0x3F82},         // tie -> even (up)
      {"bf16", 1.0f + 0x1p-8f + 0x1p-20f, 0x3F81},  // just above the tie
      {"bf16", -1.0f - 0x1p-8f, 0xBF80},
      {"bf16", big, 0x7F80},            // rounds past the largest finite: inf
      {"bf16", 0x1.FEp127f, 0x7F7F},    // largest finite bf16 itself
      {"bf16", 0x1p-133f, 0x0001},      // smallest bf16 subnormal
      {"bf16", 0x1p-134f, 0x0000},      // half of it: tie -> even (zero)
      {"bf16", 3 * 0x1p-134f, 0x0002},  // 1.5 ulps: tie -> even (2)
      {"bf16", -0.0f, 0x8000},
      {"bf16", inf, 0x7F80},
      {"bf16", -inf, 0xFF80},
      // f16: 11-bit significand, largest finite 65504.
      {"f16", 1.0f, 0x3C00},
      {"f16", 1.0f + 0x1p-11f, 0x3C00},
      {"f16", 1.0f + 3 * 0x1p-11f, 0x3C02},
      {"f16", 65504.0f, 0x7BFF},
      {"f16", 65519.0f, 0x7BFF},
      {"f16", 65520.0f, 0x7C00},  // tie between 65504 (odd) and 2^16: inf
      {"f16", 1e6f, 0x7C00},
      {"f16", -1e6f, 0xFC00},
      {"f16", 0x1p-24f, 0x0001},  // smallest subnormal
      {"f16", 0x1p-25f, 0x0000},  // tie -> zero
      {"f16", 0x1p-25f + 0x1p-40f, 0x0001},
      {"f16", 3 * 0x1p-25f, 0x0002},
      {"f16", 1023 * 0x1p-24f + 0x1p-25f, 0x0400},  // tie at the top of the subnormals: carry
      {"f16", 0x1p-14f, 0x0400},                    // smallest normal
      {"f16", 0x1p-130f, 0x0000},                   // float subnormal range
      {"f16", -0.0f, 0x8000},
      {"f16", inf, 0x7C00},
      // e4m3 (fn, satfinite): largest 448, no infinities.
      {"e4m3", 1.0f, 0x38},
      {"e4m3", 1.0625f, 0x38},  // tie -> even
      {"e4m3", 1.1875f, 0x3A},  // tie -> even (up)
      {"e4m3", 448.0f, 0x7E},
      {"e4m3", 464.0f, 0x7E},  // tie between 448 and (NaN) 480: 448
      {"e4m3", 470.0f, 0x7E},  // saturates instead of rounding to NaN
      {"e4m3", 1e9f, 0x7E},
      {"e4m3", -1e9f, 0xFE},
      {"e4m3", inf, 0x7E},
      {"e4m3", -inf, 0xFE},
      {"e4m3", 0x1p-9f, 0x01},
      {"e4m3", 0x1p-10f, 0x00},  // tie -> zero
      {"e4m3", 0x1p-10f + 0x1p-20f, 0x01},
      {"e4m3", 3 * 0x1p-10f, 0x02},
      {"e4m3", 7.5f * 0x1p-9f, 0x08},  // tie between 0x07 and 0x08: even, a normal
      {"e4m3", -0.0f, 0x80},
      {"e4m3", 1e-30f, 0x00},
      {"e4m3", -1e-30f, 0x80},
      // e5m2 (satfinite): largest 57344.
      {"e5m2", 1.0f, 0x3C},
      {"e5m2", 1.125f, 0x3C},  // tie -> even
      {"e5m2", 1.375f, 0x3E},  // tie -> even (up)
      {"e5m2", 57344.0f, 0x7B},
      {"e5m2", 61439.0f, 0x7B},
      {"e5m2", 61440.0f, 0x7B},  // tie would round to inf; saturates
      {"e5m2", 1e9f, 0x7B},
      {"e5m2", inf, 0x7B},
      {"e5m2", -inf, 0xFB},
      {"e5m2", 0x1p-16f, 0x01},
      {"e5m2", 0x1p-17f, 0x00},
      {"e5m2", 3 * 0x1p-17f, 0x02},
      {"e5m2", -0.0f, 0x80},
  };
  for (const Case& c : cases) {
    const std::string format = c.format;
    CAPTURE(format);
    CAPTURE(c.input);
    std::uint32_t got = 0;
    if (format == "bf16") got = float_to_bf16(c.input);
    if (format == "f16") got = float_to_f16(c.input);
    if (format == "e4m3") got = float_to_fp8_e4m3(c.input);
    if (format == "e5m2") got = float_to_fp8_e5m2(c.input);
    CHECK(hex(got) == hex(c.bits));
  }
}

TEST_CASE("numeric: NaN inputs encode to NaN with their sign") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  CHECK(float_to_fp8_e4m3(nan) == 0x7F);
  CHECK(float_to_fp8_e4m3(-nan) == 0xFF);
  CHECK(float_to_fp8_e5m2(nan) == 0x7E);  // CUDA's quiet NaN for the canonical float NaN
  CHECK(float_to_fp8_e5m2(-nan) == 0xFE);
  CHECK(std::isnan(bf16_to_float(float_to_bf16(nan))));
  CHECK(std::isnan(f16_to_float(float_to_f16(nan))));
  // A float NaN whose payload lies only in the low bits must not truncate to an infinity.
  const float low_payload = std::bit_cast<float>(0x7F800001u);
  CHECK(std::isnan(bf16_to_float(float_to_bf16(low_payload))));
  CHECK(std::isnan(f16_to_float(float_to_f16(low_payload))));
}

TEST_CASE("numeric: encoding picks the nearest value with ties to even for a million floats") {
  // Property check against the decoded neighbours of the result: nothing representable is
  // closer, and a tie lands on an even pattern.
  std::mt19937_64 rng(20240607);
  for (const Format* format : kFormats) {
    const std::string name = format->name;
    CAPTURE(name);
    const std::uint32_t sign_bit = 1u << (format->exponent_bits + format->mantissa_bits);
    // Largest finite magnitude pattern: below the all-ones exponent (IEEE), or below the NaN.
    const std::uint32_t max_finite =
        format->ieee_specials ? ((((1u << format->exponent_bits) - 1) << format->mantissa_bits) - 1)
                              : sign_bit - 2;
    const double max_value = decode_by_definition(max_finite, *format);
    const int bias = (1 << (format->exponent_bits - 1)) - 1;
    // Exponents from below half the smallest subnormal to past the largest finite.
    std::uniform_int_distribution<int> exponent(-bias - format->mantissa_bits - 2, bias + 2);
    std::size_t failures = 0;
    std::string first_failure;
    for (int i = 0; i < 1 << 18; ++i) {
      const std::uint64_t r = rng();
      const double significand = 1.0 + static_cast<double>(r >> 41) * 0x1p-23;
      const double magnitude = std::ldexp(significand, exponent(rng));
      const auto input = static_cast<float>((r & 1) != 0 ? -magnitude : magnitude);
      if (!(std::fabs(static_cast<double>(input)) <= max_value)) continue;
      const std::uint32_t bits = format->encode(input);
      const std::uint32_t mag = bits & (sign_bit - 1);
      const double x = std::fabs(static_cast<double>(input));
      const double chosen = std::fabs(format->decode(bits));
      bool ok = std::signbit(format->decode(bits)) == std::signbit(input) && mag <= max_finite;
      for (const std::uint32_t neighbour : {mag - 1, mag + 1}) {
        if (mag == 0 && neighbour == mag - 1) continue;
        if (neighbour > max_finite) continue;
        const double other = decode_by_definition(neighbour, *format);
        const double d_chosen = std::fabs(x - chosen);
        const double d_other = std::fabs(x - other);
        if (d_other < d_chosen) ok = false;
        if (d_other == d_chosen && (mag & 1u) != 0) ok = false;
      }
      if (!ok && failures++ == 0) first_failure = std::to_string(input);
    }
    INFO("first failing input: " << first_failure);
    CHECK(failures == 0);
  }
}

TEST_CASE("numeric: element_as_double reads every dtype") {
  struct Case {
    DType dtype;
    std::vector<unsigned char> bytes;  // little-endian storage of element 1 (element 0 is junk)
    double value;
  };
  auto pack = [](auto first, auto second) {
    std::vector<unsigned char> out(2 * sizeof(first));
    std::memcpy(out.data(), &first, sizeof(first));
    std::memcpy(out.data() + sizeof(first), &second, sizeof(second));
    return out;
  };
  const Case cases[] = {
      {DType::kBF16, pack(std::uint16_t{0}, std::uint16_t{0xC0A0}), -5.0},
      {DType::kF16, pack(std::uint16_t{0}, std::uint16_t{0x3E00}), 1.5},
      {DType::kF32, pack(0.0f, 0.1f), static_cast<double>(0.1f)},
      {DType::kF64, pack(0.0, 0.1), 0.1},
      {DType::kFP8E4M3, pack(std::uint8_t{0}, std::uint8_t{0x7E}), 448.0},
      {DType::kFP8E5M2, pack(std::uint8_t{0}, std::uint8_t{0xFB}), -57344.0},
      {DType::kI8, pack(std::int8_t{0}, std::int8_t{-128}), -128.0},
      {DType::kU8, pack(std::uint8_t{0}, std::uint8_t{255}), 255.0},
      {DType::kI16, pack(std::int16_t{0}, std::int16_t{-32768}), -32768.0},
      {DType::kI32, pack(std::int32_t{0}, std::int32_t{-2000000000}), -2000000000.0},
      {DType::kI64, pack(std::int64_t{0}, std::int64_t{1} << 53), 0x1p53},
      {DType::kBool, pack(std::uint8_t{0}, std::uint8_t{1}), 1.0},
      {DType::kBool, pack(std::uint8_t{1}, std::uint8_t{0}), 0.0},
  };
  for (const Case& c : cases) {
    CAPTURE(static_cast<int>(c.dtype));
    CHECK(element_as_double(c.dtype, c.bytes.data(), 1) == c.value);
  }
  // Unaligned storage is fine.
  unsigned char unaligned[9] = {};
  const float three = 3.0f;
  std::memcpy(unaligned + 1, &three, sizeof three);
  CHECK(element_as_double(DType::kF32, unaligned + 1, 0) == 3.0);
}
