// Output comparison: tolerance, poison, NaN, all-zero, hidden-value hygiene, canaries, bytes.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/numeric.hpp"
#include "judge/compare.hpp"

using namespace crucible;
using core::DType;
using judge::compare_outputs;
using judge::CompareReport;
using judge::Tolerance;

namespace {

const DType kAllDTypes[] = {DType::kBF16,    DType::kF16,     DType::kF32, DType::kF64,
                            DType::kFP8E4M3, DType::kFP8E5M2, DType::kI8,  DType::kU8,
                            DType::kI16,     DType::kI32,     DType::kI64, DType::kBool};
const DType kFloatDTypes[] = {DType::kBF16, DType::kF16,     DType::kF32,
                              DType::kF64,  DType::kFP8E4M3, DType::kFP8E5M2};

template <class T>
void put(std::vector<unsigned char>& buffer, std::size_t index, T value) {
  std::memcpy(buffer.data() + index * sizeof(T), &value, sizeof(T));
}

// Stores `value` (rounded to the dtype) as element `index`.
void set_element(DType dtype, std::vector<unsigned char>& buffer, std::size_t index, double value) {
  const auto f = static_cast<float>(value);
  switch (dtype) {
    case DType::kBF16:
      put(buffer, index, core::float_to_bf16(f));
      break;
    case DType::kF16:
      put(buffer, index, core::float_to_f16(f));
      break;
    case DType::kF32:
      put(buffer, index, f);
      break;
    case DType::kF64:
      put(buffer, index, value);
      break;
    case DType::kFP8E4M3:
      put(buffer, index, core::float_to_fp8_e4m3(f));
      break;
    case DType::kFP8E5M2:
      // The satfinite conversion turns infinities into 57344; tests that need an e5m2 infinity
      // get the format's own pattern.
      put(buffer, index,
          std::isinf(value) ? static_cast<std::uint8_t>(value > 0 ? 0x7C : 0xFC)
                            : core::float_to_fp8_e5m2(f));
      break;
    case DType::kI8:
      put(buffer, index, static_cast<std::int8_t>(value));
      break;
    case DType::kU8:
      put(buffer, index, static_cast<std::uint8_t>(value));
      break;
    case DType::kI16:
      put(buffer, index, static_cast<std::int16_t>(value));
      break;
    case DType::kI32:
      put(buffer, index, static_cast<std::int32_t>(value));
      break;
    case DType::kI64:
      put(buffer, index, static_cast<std::int64_t>(value));
      break;
    case DType::kBool:
      put(buffer, index, static_cast<std::uint8_t>(value != 0 ? 1 : 0));
      break;
  }
}

std::vector<unsigned char> make_buffer(DType dtype, const std::vector<double>& values) {
  std::vector<unsigned char> buffer(values.size() * core::dtype_size(dtype));
  for (std::size_t i = 0; i < values.size(); ++i) set_element(dtype, buffer, i, values[i]);
  return buffer;
}

// A reference pattern exact in every dtype: 1..7 (bool: alternating 0/1).
std::vector<double> pattern(DType dtype, std::size_t count) {
  std::vector<double> values(count);
  for (std::size_t i = 0; i < count; ++i) {
    values[i] = dtype == DType::kBool ? static_cast<double>(i % 2) : static_cast<double>(i % 7 + 1);
  }
  return values;
}

// A value clearly beyond any default tolerance of `value`.
double far_from(DType dtype, double value) {
  return dtype == DType::kBool ? 1 - value : value + 16;
}

CompareReport compare(DType dtype, const std::vector<unsigned char>& candidate,
                      const std::vector<unsigned char>& reference,
                      const std::vector<std::int64_t>& shape, int variant = 0, bool reveal = true) {
  const std::size_t count = reference.size() / core::dtype_size(dtype);
  return compare_outputs(dtype, candidate.data(), reference.data(), count, shape,
                         judge::default_tolerance(dtype), variant, reveal, "out");
}

const std::vector<std::int64_t> kShape{4, 16};
constexpr std::size_t kCount = 64;

}  // namespace

TEST_CASE("compare: identical outputs pass for every dtype") {
  for (const DType dtype : kAllDTypes) {
    CAPTURE(core::dtype_name(dtype));
    const auto reference = make_buffer(dtype, pattern(dtype, kCount));
    const CompareReport report = compare(dtype, reference, reference, kShape);
    CHECK(report.pass);
    CHECK(report.mismatches == 0);
    CHECK(report.unwritten == 0);
    CHECK_FALSE(report.first_mismatch.has_value());
    CHECK_FALSE(report.all_zero);
    CHECK(report.summary.find("all 64 elements match") != std::string::npos);
  }
}

TEST_CASE("compare: one element off fails with its flat index and coordinates for every dtype") {
  for (const DType dtype : kAllDTypes) {
    CAPTURE(core::dtype_name(dtype));
    auto values = pattern(dtype, kCount);
    const auto reference = make_buffer(dtype, values);
    values[37] = far_from(dtype, values[37]);
    const auto candidate = make_buffer(dtype, values);
    const CompareReport report = compare(dtype, candidate, reference, kShape);
    CHECK_FALSE(report.pass);
    CHECK(report.mismatches == 1);
    CHECK(report.unwritten == 0);
    CHECK(report.nan_mismatches == 0);
    REQUIRE(report.first_mismatch.has_value());
    CHECK(*report.first_mismatch == 37);
    CHECK(report.first_mismatch_coords == std::vector<std::int64_t>{2, 5});
    CHECK(report.summary.find("1 of 64 elements differ") != std::string::npos);
    CHECK(report.summary.find("first at [2, 5]") != std::string::npos);
    // Without a matching shape the position is still given, as a flat index.
    const CompareReport flat = compare(dtype, candidate, reference, {3, 3});
    CHECK(flat.first_mismatch_coords.empty());
    CHECK(flat.summary.find("first at flat index 37") != std::string::npos);
  }
}

TEST_CASE("compare: NaN or infinity in the candidate fails where the reference is finite") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (const DType dtype : kFloatDTypes) {
    CAPTURE(core::dtype_name(dtype));
    const auto values = pattern(dtype, kCount);
    const auto reference = make_buffer(dtype, values);
    for (const double bad : {nan, -nan, inf, -inf}) {
      CAPTURE(bad);
      // e4m3 has no infinity: converting one saturates to 448, an ordinary wrong value.
      if (dtype == DType::kFP8E4M3 && std::isinf(bad)) continue;
      auto wrong = values;
      wrong[5] = bad;
      const CompareReport report = compare(dtype, make_buffer(dtype, wrong), reference, kShape);
      CHECK_FALSE(report.pass);
      CHECK(report.mismatches == 1);
      CHECK(*report.first_mismatch == 5);
      if (dtype == DType::kFP8E4M3) {
        // e4m3 has one NaN per sign, and each is one variant's poison: a NaN the kernel wrote
        // reads as unwritten under one variant, a NaN mismatch under the other. Both fail.
        CHECK(report.nan_mismatches + report.unwritten == 1);
        continue;
      }
      CHECK(report.nan_mismatches == 1);
      CHECK(report.unwritten == 0);
      CHECK(report.summary.find("1 NaN/Inf where the reference differs") != std::string::npos);
    }
  }
}

TEST_CASE("compare: an infinity matches the same infinity and no other value") {
  const double inf = std::numeric_limits<double>::infinity();
  for (const DType dtype : {DType::kBF16, DType::kF16, DType::kF32, DType::kF64, DType::kFP8E5M2}) {
    CAPTURE(core::dtype_name(dtype));
    auto values = pattern(dtype, kCount);
    values[3] = inf;
    values[4] = -inf;
    const auto reference = make_buffer(dtype, values);
    CHECK(compare(dtype, reference, reference, kShape).pass);
    auto flipped = values;
    flipped[3] = -inf;
    flipped[4] = 1.0;
    const CompareReport report = compare(dtype, make_buffer(dtype, flipped), reference, kShape);
    CHECK(report.nan_mismatches == 2);
    CHECK(report.mismatches == 2);
    CHECK(report.max_abs_error == 0.0);  // errors are measured over finite pairs only
  }
}

TEST_CASE("compare: elements left holding the poison are counted as unwritten") {
  for (const DType dtype : kAllDTypes) {
    for (const int variant : {0, 1}) {
      CAPTURE(core::dtype_name(dtype));
      CAPTURE(variant);
      const auto values = pattern(dtype, kCount);
      const auto reference = make_buffer(dtype, values);
      // The runner's sequence: poison everything, then the kernel writes all but three.
      std::vector<unsigned char> candidate(reference.size());
      judge::fill_poison(dtype, candidate.data(), kCount, variant);
      for (std::size_t i = 0; i < kCount; ++i) {
        if (i != 9 && i != 40 && i != 63) set_element(dtype, candidate, i, values[i]);
      }
      for (std::size_t i = 0; i < kCount; ++i) {
        CHECK(judge::is_poison(dtype, candidate.data(), i, variant) ==
              (i == 9 || i == 40 || i == 63));
      }
      const CompareReport report = compare(dtype, candidate, reference, kShape, variant);
      CHECK_FALSE(report.pass);
      CHECK(report.unwritten == 3);
      CHECK(report.mismatches == 3);
      CHECK(report.nan_mismatches == 0);
      CHECK(*report.first_mismatch == 9);
      CHECK(report.summary.find("first at [0, 9]: never written") != std::string::npos);
      CHECK(report.summary.find("3 unwritten") != std::string::npos);
    }
  }
}

TEST_CASE("compare: a kernel writing the variant 0 poison is caught by the variant 1 run") {
  for (const DType dtype : kAllDTypes) {
    CAPTURE(core::dtype_name(dtype));
    const auto values = pattern(dtype, kCount);
    const auto reference = make_buffer(dtype, values);
    auto candidate = reference;
    for (const std::size_t i : {2, 11, 50}) {
      judge::fill_poison(dtype, candidate.data() + i * core::dtype_size(dtype), 1, 0);
      CHECK_FALSE(judge::is_poison(dtype, candidate.data(), i, 1));
    }
    const CompareReport first_run = compare(dtype, candidate, reference, kShape, 0);
    CHECK(first_run.unwritten == 3);
    const CompareReport second_run = compare(dtype, candidate, reference, kShape, 1);
    CHECK_FALSE(second_run.pass);
    CHECK(second_run.unwritten == 0);
    CHECK(second_run.mismatches == 3);
  }
}

TEST_CASE("compare: the poison patterns of the two variants are NaNs or sentinels and differ") {
  for (const DType dtype : kAllDTypes) {
    CAPTURE(core::dtype_name(dtype));
    const std::size_t size = core::dtype_size(dtype);
    std::vector<unsigned char> zero(size), one(size);
    judge::fill_poison(dtype, zero.data(), 1, 0);
    judge::fill_poison(dtype, one.data(), 1, 1);
    CHECK(zero != one);
    CHECK(judge::is_poison(dtype, zero.data(), 0, 0));
    CHECK(judge::is_poison(dtype, one.data(), 0, 1));
    CHECK(judge::is_poison(dtype, zero.data(), 0, 2));  // variants are taken modulo 2
    if (core::dtype_is_floating(dtype)) {
      CHECK(std::isnan(core::element_as_double(dtype, zero.data(), 0)));
      CHECK(std::isnan(core::element_as_double(dtype, one.data(), 0)));
    } else {
      CHECK(core::element_as_double(dtype, zero.data(), 0) != 0.0);
      CHECK(core::element_as_double(dtype, one.data(), 0) != 0.0);
    }
  }
  // The float poisons are not the NaNs arithmetic or CUDA conversions produce.
  std::vector<unsigned char> f32(4), bf16(2), f16(2), e5m2(1);
  judge::fill_poison(DType::kF32, f32.data(), 1, 0);
  judge::fill_poison(DType::kBF16, bf16.data(), 1, 0);
  judge::fill_poison(DType::kF16, f16.data(), 1, 0);
  judge::fill_poison(DType::kFP8E5M2, e5m2.data(), 1, 0);
  const float qnan = std::numeric_limits<float>::quiet_NaN();
  CHECK_FALSE(judge::is_poison(DType::kF32, &qnan, 0, 0));
  const std::uint16_t canonical_bf16[] = {0x7FC0, 0x7FFF, 0xFFC0};
  const std::uint16_t canonical_f16[] = {0x7E00, 0x7FFF, 0xFE00};
  for (int i = 0; i < 3; ++i) {
    CHECK_FALSE(judge::is_poison(DType::kBF16, canonical_bf16, static_cast<std::size_t>(i), 0));
    CHECK_FALSE(judge::is_poison(DType::kF16, canonical_f16, static_cast<std::size_t>(i), 0));
  }
  const std::uint8_t converted_e5m2 = core::float_to_fp8_e5m2(qnan);
  CHECK_FALSE(judge::is_poison(DType::kFP8E5M2, &converted_e5m2, 0, 0));
}

TEST_CASE("compare: an integer poison equal to the reference value is accepted") {
  for (const DType dtype : {DType::kI8, DType::kU8, DType::kI16, DType::kI32, DType::kI64}) {
    CAPTURE(core::dtype_name(dtype));
    std::vector<unsigned char> reference(kCount * core::dtype_size(dtype));
    judge::fill_poison(dtype, reference.data(), kCount, 0);
    const CompareReport report = compare(dtype, reference, reference, kShape, 0);
    CHECK(report.pass);
    CHECK(report.unwritten == 0);
  }
}

TEST_CASE("compare: an all-zero output is flagged even when within tolerance") {
  for (const DType dtype : kAllDTypes) {
    CAPTURE(core::dtype_name(dtype));
    const auto reference = make_buffer(dtype, pattern(dtype, kCount));
    const auto zeros = make_buffer(dtype, std::vector<double>(kCount, 0.0));
    const CompareReport report = compare(dtype, zeros, reference, kShape);
    CHECK_FALSE(report.pass);
    CHECK(report.all_zero);
    CHECK(report.summary.find("zero while the reference is not") != std::string::npos);
    // Zeros against zeros are simply right.
    const CompareReport both = compare(dtype, zeros, zeros, kShape);
    CHECK(both.pass);
    CHECK_FALSE(both.all_zero);
  }
  // A reference whose values all lie within atol of zero: every element passes, the verdict
  // does not.
  const auto tiny = make_buffer(DType::kF32, std::vector<double>(kCount, 1e-6));
  const auto zeros = make_buffer(DType::kF32, std::vector<double>(kCount, -0.0));
  const CompareReport report = compare(DType::kF32, zeros, tiny, kShape);
  CHECK(report.mismatches == 0);
  CHECK(report.all_zero);
  CHECK_FALSE(report.pass);
  CHECK(report.summary.find("every element is zero") != std::string::npos);
}

TEST_CASE("compare: the tolerance bound is inclusive and the next value above fails") {
  // atol 0.5 + rtol 0.25 * |2| = 1: exact in every float format.
  struct Case {
    DType dtype;
    double just_above_3;  // the next representable value above 3
    double just_below_1;  // the next representable value below 1 (f64: two below, since
                          // |1 - 2^-53 - 2| itself rounds to 1 in double arithmetic)
  };
  const Case cases[] = {
      {DType::kF32, static_cast<double>(std::nextafter(3.0f, 4.0f)),
       static_cast<double>(std::nextafter(1.0f, 0.0f))},
      {DType::kF64, std::nextafter(3.0, 4.0), 1.0 - 0x1p-52},
      {DType::kBF16, 3.0 + 0x1p-6, 1.0 - 0x1p-8},
      {DType::kF16, 3.0 + 0x1p-9, 1.0 - 0x1p-11},
      {DType::kFP8E4M3, 3.25, 0.9375},
      {DType::kFP8E5M2, 3.5, 0.875},
  };
  const Tolerance tol{0.5, 0.25};
  for (const Case& c : cases) {
    CAPTURE(core::dtype_name(c.dtype));
    const auto reference = make_buffer(c.dtype, {2.0, -2.0});
    auto check = [&](double got, double got_negative) {
      const auto candidate = make_buffer(c.dtype, {got, got_negative});
      REQUIRE(core::element_as_double(c.dtype, candidate.data(), 0) == got);
      return compare_outputs(c.dtype, candidate.data(), reference.data(), 2, {2}, tol, 0, true,
                             "out");
    };
    CHECK(check(3.0, -3.0).pass);
    CHECK(check(1.0, -1.0).pass);
    const CompareReport above = check(c.just_above_3, -c.just_above_3);
    CHECK(above.mismatches == 2);
    const CompareReport below = check(c.just_below_1, -c.just_below_1);
    CHECK(below.mismatches == 2);
  }
  // Integers under a widened tolerance: |6 - 5| <= 1 passes, 7 does not.
  for (const DType dtype : {DType::kI8, DType::kU8, DType::kI16, DType::kI32, DType::kI64}) {
    CAPTURE(core::dtype_name(dtype));
    const auto reference = make_buffer(dtype, {5.0});
    const auto ok = make_buffer(dtype, {6.0});
    const auto bad = make_buffer(dtype, {7.0});
    CHECK(
        compare_outputs(dtype, ok.data(), reference.data(), 1, {1}, {1.0, 0.0}, 0, true, "o").pass);
    CHECK_FALSE(
        compare_outputs(dtype, bad.data(), reference.data(), 1, {1}, {1.0, 0.0}, 0, true, "o")
            .pass);
  }
}

TEST_CASE("compare: integers are exact even where doubles cannot tell values apart") {
  const std::int64_t big = (std::int64_t{1} << 60) + 1;
  const std::int64_t neighbour = std::int64_t{1} << 60;
  const CompareReport report = compare_outputs(
      DType::kI64, &neighbour, &big, 1, {1}, judge::default_tolerance(DType::kI64), 0, true, "ids");
  CHECK_FALSE(report.pass);
  CHECK(report.max_abs_error == 1.0);
}

TEST_CASE("compare: default tolerances are the documented values") {
  struct Case {
    DType dtype;
    double atol;
    double rtol;
  };
  const Case cases[] = {
      {DType::kBF16, 1e-2, 0x1p-6},
      {DType::kF16, 1e-3, 0x1p-9},
      {DType::kF32, 1e-5, 1e-5},
      {DType::kF64, 1e-12, 1e-10},
      {DType::kFP8E4M3, 0x1p-6, 0x1p-3},
      {DType::kFP8E5M2, 0x1p-14, 0x1p-2},
      {DType::kI8, 0, 0},
      {DType::kU8, 0, 0},
      {DType::kI16, 0, 0},
      {DType::kI32, 0, 0},
      {DType::kI64, 0, 0},
      {DType::kBool, 0, 0},
  };
  for (const Case& c : cases) {
    CAPTURE(core::dtype_name(c.dtype));
    const Tolerance tol = judge::default_tolerance(c.dtype);
    CHECK(tol.atol == c.atol);
    CHECK(tol.rtol == c.rtol);
  }
}

TEST_CASE("compare: default tolerances admit the documented ulps at 8 and no more") {
  // At the bottom of a binade (8 = 2^3) the ulp is smallest relative to the value.
  struct Case {
    DType dtype;
    double ulp_at_8;
    int admitted_ulps;  // two for 16-bit types, one for fp8
  };
  const Case cases[] = {
      {DType::kBF16, 0x1p-4, 2},
      {DType::kF16, 0x1p-7, 2},
      {DType::kFP8E4M3, 1.0, 1},
      {DType::kFP8E5M2, 2.0, 1},
  };
  for (const Case& c : cases) {
    CAPTURE(core::dtype_name(c.dtype));
    const auto reference = make_buffer(c.dtype, {8.0});
    const auto admitted = make_buffer(c.dtype, {8.0 + c.admitted_ulps * c.ulp_at_8});
    const auto rejected = make_buffer(c.dtype, {8.0 + (c.admitted_ulps + 1) * c.ulp_at_8});
    CHECK(compare(c.dtype, admitted, reference, {1}).pass);
    CHECK_FALSE(compare(c.dtype, rejected, reference, {1}).pass);
  }
}

TEST_CASE("compare: a hidden case's report carries no expected value") {
  // Values chosen so that no count, index or tolerance in the text can contain them by chance.
  struct Case {
    DType dtype;
    double expected;
    const char* expected_text;
    const char* error_text;
  };
  const Case cases[] = {
      {DType::kF32, 12.375, "12.375", "8.875"},  {DType::kF64, 12.375, "12.375", "8.875"},
      {DType::kBF16, 12.375, "12.375", "8.875"}, {DType::kF16, 12.375, "12.375", "8.875"},
      {DType::kFP8E4M3, 13.0, "13", "9.5"},      {DType::kI32, 987654, "987654", "987650"},
  };
  for (const Case& c : cases) {
    CAPTURE(core::dtype_name(c.dtype));
    std::vector<double> expected(kCount, c.expected);
    std::vector<double> got(kCount, c.expected);
    got[17] = c.dtype == DType::kI32 ? 4.0 : 3.5;
    const auto reference = make_buffer(c.dtype, expected);
    const auto candidate = make_buffer(c.dtype, got);
    const CompareReport hidden = compare(c.dtype, candidate, reference, kShape, 0, false);
    CHECK_FALSE(hidden.pass);
    const std::string hidden_text = hidden.summary + " " + hidden.to_value().dump();
    CHECK(hidden_text.find(c.expected_text) == std::string::npos);
    CHECK(hidden_text.find(c.error_text) == std::string::npos);
    CHECK(hidden_text.find("expected") == std::string::npos);
    CHECK(hidden.summary.find("first at [1, 1]") != std::string::npos);
    // The same comparison revealed does show them, so the check above can fail.
    const CompareReport shown = compare(c.dtype, candidate, reference, kShape, 0, true);
    const std::string shown_text = shown.summary + " " + shown.to_value().dump();
    CHECK(shown_text.find(c.expected_text) != std::string::npos);
    CHECK(shown_text.find(c.error_text) != std::string::npos);
  }
}

TEST_CASE("compare: the summary is one sentence an agent can act on") {
  std::vector<double> expected(kCount, 0.984375);
  auto got = expected;
  got[17] = 1.25;
  got[20] = 2.0;
  const auto reference = make_buffer(DType::kF32, expected);
  auto candidate = make_buffer(DType::kF32, got);
  judge::fill_poison(DType::kF32, candidate.data() + 30 * 4, 1, 0);
  const CompareReport report = compare_outputs(DType::kF32, candidate.data(), reference.data(),
                                               kCount, {1, 64}, {0.01, 0.01}, 0, true, "out");
  CHECK(report.summary ==
        "output 'out': 3 of 64 elements differ (atol 0.01 + rtol 0.01 * |ref|); first at "
        "[0, 17]: got 1.25, expected 0.984375; 1 unwritten");
  const CompareReport exact = compare_outputs(DType::kI32, candidate.data(), reference.data(),
                                              kCount, {64}, {0, 0}, 0, true, "idx");
  CHECK(exact.summary.find("(exact match required)") != std::string::npos);
}

TEST_CASE("compare: NaN in the reference is reported as the server's fault") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const DType dtype : kFloatDTypes) {
    CAPTURE(core::dtype_name(dtype));
    auto values = pattern(dtype, kCount);
    values[8] = nan;
    const auto reference = make_buffer(dtype, values);
    const CompareReport report = compare(dtype, reference, reference, kShape);
    CHECK_FALSE(report.pass);
    CHECK(report.reference_invalid());
    CHECK(report.reference_nans == 1);
    CHECK(report.mismatches == 0);
    CHECK(report.summary.find("infra_error") != std::string::npos);
  }
}

TEST_CASE("compare: to_value reports counts, positions and revealed errors") {
  auto values = pattern(DType::kF32, kCount);
  const auto reference = make_buffer(DType::kF32, values);
  values[33] += 0.5;
  const auto candidate = make_buffer(DType::kF32, values);
  const core::Value value = compare(DType::kF32, candidate, reference, kShape).to_value();
  CHECK(value["output"] == "out");
  CHECK(value["pass"] == false);
  CHECK(value["count"] == 64);
  CHECK(value["mismatches"] == 1);
  CHECK(value["unwritten"] == 0);
  CHECK(value["first_mismatch"] == 33);
  CHECK(value["first_mismatch_coords"] == core::Value::array({2, 1}));
  CHECK(value["max_abs_error"] == 0.5);
  CHECK(value.contains("first_expected"));
  const core::Value passing = compare(DType::kF32, reference, reference, kShape).to_value();
  CHECK(passing["first_mismatch"].is_null());
  CHECK_FALSE(passing.contains("first_got"));
}

TEST_CASE("compare: an empty output passes") {
  const CompareReport report =
      compare_outputs(DType::kF32, nullptr, nullptr, 0, {0, 8}, {0, 0}, 0, true, "out");
  CHECK(report.pass);
  CHECK(report.count == 0);
}

TEST_CASE("compare: flat indices map to row-major coordinates") {
  struct Case {
    std::size_t index;
    std::size_t count;
    std::vector<std::int64_t> shape;
    std::vector<std::int64_t> coords;
  };
  const Case cases[] = {
      {0, 64, {4, 16}, {0, 0}},
      {63, 64, {4, 16}, {3, 15}},
      {37, 64, {4, 16}, {2, 5}},
      {23, 24, {2, 3, 4}, {1, 2, 3}},
      {13, 24, {2, 3, 4}, {1, 0, 1}},
      {5, 6, {6}, {5}},
      {5, 6, {1, 6, 1}, {0, 5, 0}},
      {5, 7, {6}, {}},  // shape disagrees with the count
      {6, 6, {6}, {}},  // out of range
      {0, 1, {}, {}},   // no shape
      {0, 0, {0, 4}, {}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.index);
    CHECK(judge::flat_to_coords(c.index, c.count, c.shape) == c.coords);
  }
}

TEST_CASE("compare: byte comparison finds the first differing byte and counts all") {
  std::vector<unsigned char> a(100), b(100);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = b[i] = static_cast<unsigned char>(i * 7);
  judge::ByteDiff same = judge::compare_bytes(a.data(), b.data(), a.size());
  CHECK(same.equal);
  CHECK(same.first_diff == 100);
  CHECK(same.diff_bytes == 0);
  b[5] ^= 1;
  b[99] ^= 0x80;
  const judge::ByteDiff diff = judge::compare_bytes(a.data(), b.data(), a.size());
  CHECK_FALSE(diff.equal);
  CHECK(diff.first_diff == 5);
  CHECK(diff.diff_bytes == 2);
  CHECK(judge::compare_bytes(a.data(), b.data(), 0).equal);
}

TEST_CASE("compare: canary corruption is detected at its first bad byte") {
  for (const std::size_t bytes : {1u, 7u, 8u, 37u, 4096u}) {
    CAPTURE(bytes);
    std::vector<unsigned char> guard(bytes);
    judge::fill_canary(guard.data(), bytes, 42);
    std::size_t first_bad = 12345;
    CHECK(judge::check_canary(guard.data(), bytes, 42, &first_bad));
    CHECK(first_bad == bytes);
    CHECK(judge::check_canary(guard.data(), bytes, 42, nullptr));
    // The corruption the candidate is most likely to cause: one byte past its buffer (the
    // canary's first byte), or somewhere inside.
    for (const std::size_t at : {std::size_t{0}, bytes / 2, bytes - 1}) {
      auto corrupted = guard;
      corrupted[at] ^= 0x01;
      if (at + 1 < bytes) corrupted[bytes - 1] ^= 0x10;  // a later corruption does not hide it
      CHECK_FALSE(judge::check_canary(corrupted.data(), bytes, 42, &first_bad));
      CHECK(first_bad == at);
    }
  }
  // Distinct seeds give distinct patterns, and the pattern is not a constant fill.
  std::vector<unsigned char> a(64), b(64);
  judge::fill_canary(a.data(), a.size(), 1);
  judge::fill_canary(b.data(), b.size(), 2);
  CHECK(a != b);
  CHECK_FALSE(judge::check_canary(a.data(), a.size(), 2, nullptr));
  std::size_t distinct = 0;
  for (std::size_t i = 1; i < a.size(); ++i) distinct += a[i] != a[0] ? 1 : 0;
  CHECK(distinct > 50);
  // Zeroed memory is not a valid canary.
  std::vector<unsigned char> zeros(64, 0);
  CHECK_FALSE(judge::check_canary(zeros.data(), zeros.size(), 1, nullptr));
}

TEST_CASE("compare: the elementwise checker gives the same verdict as compare_outputs") {
  auto values = pattern(DType::kBF16, kCount);
  const auto reference = make_buffer(DType::kBF16, values);
  values[60] = -3.0;
  const auto candidate = make_buffer(DType::kBF16, values);
  const judge::ElementwiseChecker checker;
  const judge::OutputChecker& generic = checker;
  const judge::CheckRequest request{{"out", DType::kBF16, candidate.data(), kCount, kShape},
                                    {"out", DType::kBF16, reference.data(), kCount, kShape},
                                    {},
                                    judge::default_tolerance(DType::kBF16),
                                    0,
                                    true};
  const CompareReport via_checker = generic.check(request);
  const CompareReport direct = compare(DType::kBF16, candidate, reference, kShape);
  CHECK(via_checker.summary == direct.summary);
  CHECK(via_checker.pass == direct.pass);
  CHECK(*via_checker.first_mismatch == 60);
}

TEST_CASE("compare: mismatches and errors are found in every block of a large output") {
  // The float loop accepts clean blocks of elements in one pass and re-walks the others; place
  // failures at block edges, a matched infinity (an unclean block without failures) and a
  // one-ulp difference in an otherwise clean block.
  struct Case {
    DType dtype;
    double ulp_at_4;
  };
  const Case cases[] = {
      {DType::kBF16, 0x1p-5}, {DType::kF16, 0x1p-8},  {DType::kF32, 0x1p-21},
      {DType::kF64, 0x1p-50}, {DType::kFP8E4M3, 0.5}, {DType::kFP8E5M2, 1.0},
  };
  constexpr std::size_t kLarge = 5000;
  for (const Case& c : cases) {
    CAPTURE(core::dtype_name(c.dtype));
    auto values = pattern(c.dtype, kLarge);
    if (c.dtype != DType::kFP8E4M3) values[1500] = std::numeric_limits<double>::infinity();
    values[3001] = 4.0;
    const auto reference = make_buffer(c.dtype, values);
    auto got = values;
    got[3001] = 4.0 + c.ulp_at_4;
    const CompareReport clean = compare(c.dtype, make_buffer(c.dtype, got), reference, {kLarge});
    CHECK(clean.pass);
    CHECK(clean.max_abs_error == c.ulp_at_4);
    CHECK(clean.max_rel_error == c.ulp_at_4 / 4.0);
    for (const std::size_t i : {0u, 511u, 512u, 4999u}) got[i] = far_from(c.dtype, values[i]);
    const CompareReport report = compare(c.dtype, make_buffer(c.dtype, got), reference, {kLarge});
    CHECK(report.mismatches == 4);
    CHECK(*report.first_mismatch == 0);
    CHECK(report.first_mismatch_coords == std::vector<std::int64_t>{0});
    CHECK(report.nan_mismatches == 0);
    CHECK(report.max_abs_error >= 8.0);
  }
}

TEST_CASE("compare: outputs tallied in slices on several threads get the serial verdict") {
  // Above a million elements the tally runs in slices on several threads; the folded report
  // must name the first failure in index order and count every failure once, wherever slice
  // boundaries fall.
  constexpr std::size_t kHuge = (std::size_t{1} << 22) + 7;
  for (const DType dtype : {DType::kBF16, DType::kF32, DType::kI32}) {
    CAPTURE(core::dtype_name(dtype));
    auto values = pattern(dtype, kHuge);
    const auto reference = make_buffer(dtype, values);
    auto got = values;
    const std::size_t bad[] = {1'500'001, 2'097'152, 4'194'000, kHuge - 1};
    for (const std::size_t i : bad) got[i] = far_from(dtype, values[i]);
    auto candidate = make_buffer(dtype, got);
    judge::fill_poison(dtype, candidate.data() + 3'000'000 * core::dtype_size(dtype), 1, 0);
    const CompareReport report = compare(dtype, candidate, reference, {kHuge});
    CHECK_FALSE(report.pass);
    CHECK(report.mismatches == 5);
    CHECK(report.unwritten == 1);
    CHECK(*report.first_mismatch == bad[0]);
    CHECK(report.max_abs_error >= 8.0);
    const CompareReport clean = compare(dtype, reference, reference, {kHuge});
    CHECK(clean.pass);
    CHECK(clean.max_abs_error == 0.0);
    const std::vector<double> zeros(kHuge, 0.0);
    CHECK(compare(dtype, make_buffer(dtype, zeros), reference, {kHuge}).all_zero);
  }
}
