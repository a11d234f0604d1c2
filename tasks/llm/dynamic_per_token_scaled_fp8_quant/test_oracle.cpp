// The llm/dynamic_per_token_scaled_fp8_quant oracle on hand-computed rows and on its own task's
// values.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tasks/oracle.hpp"
#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

namespace {

constexpr const char* kTaskId = "llm/dynamic_per_token_scaled_fp8_quant";

struct Quantized {
  std::vector<double> out;
  std::vector<double> scale;
};

// Runs the oracle on `rows` rows of `input` (row-major, rows * hidden values).
Quantized quantize(std::int64_t rows, std::vector<double> input) {
  const auto hidden = static_cast<std::int64_t>(input.size()) / rows;
  auto tensors = oracle_test::call_oracle(
      kTaskId, {{"num_tokens", rows}, {"hidden_size", hidden}},
      oracle_test::Tensors{
          {"input", {core::DType::kBF16, {rows, hidden}, std::move(input)}},
          {"out", {core::DType::kFP8E4M3, {rows, hidden}, std::vector<double>(rows * hidden, 0.0)}},
          {"scale", {core::DType::kF32, {rows, 1}, std::vector<double>(rows, 0.0)}},
      });
  return {tensors["out"].values, tensors["scale"].values};
}

// The vLLM scale floor 1 / (448 * 512), as fp32.
double min_scale() { return static_cast<float>(1.0 / 229376.0); }

}  // namespace

TEST_CASE("fp8 quant oracle: amax 7 gives scale 1/64 and exact e4m3 values, ties to even") {
  // scale = 7 / 448 = 1/64 exactly. Quotients: 448, -224, 64, 12 are e4m3 values. In [8, 16)
  // the e4m3 step is 1: 13.5 is a tie between 13 (odd mantissa) and 14 (even): 14; 12.5 between
  // 12 (even) and 13: 12. 12.8125 rounds to 13.
  const auto q =
      quantize(1, {7.0, -3.5, 1.0, 0.1875, 13.5 / 64, 12.5 / 64, -12.5 / 64, 0.2001953125});
  REQUIRE(q.scale.size() == 1);
  CHECK(q.scale[0] == 0.015625);
  const std::vector<double> expected{448.0, -224.0, 64.0, 12.0, 14.0, 12.0, -12.0, 13.0};
  CHECK(q.out == expected);
}

TEST_CASE("fp8 quant oracle: each row has its own scale; its max element maps to +-448") {
  // Row 0: amax 2 (negative), scale 2/448 = 1/224 rounded to fp32. Row 1: amax 0.5.
  const auto q = quantize(2, {1.0, -2.0, 0.5, 0.25, 0.5, -0.125});
  CHECK(q.scale[0] == static_cast<float>(2.0 / 448.0));
  CHECK(q.scale[1] == static_cast<float>(0.5 / 448.0));
  CHECK(q.out[1] == -448.0);
  CHECK(q.out[4] == 448.0);
  // 1 / (2/448) = 224 and 0.125 / (0.5/448) = 112 up to the fp32 rounding of the scale, which
  // is far less than half an e4m3 step.
  CHECK(q.out[0] == 224.0);
  CHECK(q.out[5] == -112.0);
}

TEST_CASE("fp8 quant oracle: tiny rows take vLLM's scale floor and zero rows quantize to zero") {
  // amax 2^-12: 2^-12 / 448 is below 1 / 229376, so the floor is the scale, and 2^-12 quantizes
  // to 2^-12 * 229376 = 56 (not 448). A zero row gets the floor and zeros.
  const auto q = quantize(2, {0x1p-12, -0x1p-13, 0.0, 0.0, 0.0, 0.0});
  CHECK(q.scale[0] == min_scale());
  CHECK(q.scale[1] == min_scale());
  CHECK(q.out[0] == doctest::Approx(56.0));
  CHECK(q.out[1] == doctest::Approx(-28.0));
  CHECK(q.out[2] == 0.0);
  CHECK(q.out[3] == 0.0);
  CHECK(q.out[4] == 0.0);
  CHECK(q.out[5] == 0.0);
}

TEST_CASE(
    "fp8 quant oracle: on generated cases every output is an e4m3 value that reconstructs "
    "the input within half an e4m3 step, and every row reaches 448") {
  const tasks::Task& task = oracle_test::repository_task(kTaskId);
  for (const char* name : {"h_tokens_7", "h_width_1001", "h_large_values"}) {
    CAPTURE(name);
    const tasks::Case& c = oracle_test::case_named(task, name);
    const oracle_test::Tensors tensors = oracle_test::run_case(task, c);
    const auto& x = tensors.at("input").values;
    const auto& out = tensors.at("out").values;
    const auto& scale = tensors.at("scale").values;
    const std::int64_t rows = c.symbols.at("num_tokens");
    const std::int64_t hidden = c.symbols.at("hidden_size");
    std::size_t not_e4m3 = 0;
    std::size_t too_far = 0;
    std::size_t rows_without_448 = 0;
    for (std::int64_t t = 0; t < rows; ++t) {
      double amax = 0.0;
      double qmax = 0.0;
      for (std::int64_t i = 0; i < hidden; ++i) amax = std::max(amax, std::abs(x[t * hidden + i]));
      CHECK(scale[t] == static_cast<float>(amax / 448.0));
      for (std::int64_t i = 0; i < hidden; ++i) {
        const double q = out[t * hidden + i];
        qmax = std::max(qmax, std::abs(q));
        not_e4m3 += tasks::round_to_dtype(core::DType::kFP8E4M3, q) == q ? 0 : 1;
        // Half a step: 2^-4 relative for normals (a step is 2^-3 of the binade's bottom), 2^-10
        // absolute among subnormals; plus a little for the fp32 roundings of scale and quotient.
        const double exact = x[t * hidden + i] / scale[t];
        const double bound = std::max(std::abs(exact) * 0x1p-4, 0x1p-10) * (1.0 + 1e-6);
        too_far += std::abs(q - exact) <= bound ? 0 : 1;
        // And back in input units: q * scale is within the same half step of x.
        too_far += std::abs(q * scale[t] - x[t * hidden + i]) <= bound * scale[t] ? 0 : 1;
      }
      rows_without_448 += qmax == 448.0 ? 0 : 1;
    }
    CHECK(not_e4m3 == 0);
    CHECK(too_far == 0);
    CHECK(rows_without_448 == 0);
  }
}

TEST_CASE(
    "dynamic_per_token_scaled_fp8_quant reference arithmetic: the corrected reciprocal product "
    "is the IEEE quotient wherever e4m3 can tell them apart") {
  // The reference forms x / scale as q = x * r, r = RN(1 / scale), corrected once by the exact
  // residual: q + RN(x - q * scale) * r. Every finite bf16 x that a row with this scale can
  // hold (|x| <= 448 * scale) against 6000 scales (the floor 1 / (448 * 512) and amax / 448 for
  // random amax over 2^-27 .. 2^32): the result must be the IEEE quotient bit for bit whenever
  // that quotient is 2^-11 or larger in magnitude. Smaller quotients round to zero in e4m3 (the
  // midpoint below its least subnormal 2^-9 is 2^-10) whichever way they differ.
  std::uint64_t state = 0x9e3779b97f4a7c15ull;
  auto next = [&state] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  const float floor_scale = 1.0f / (448.0f * 512.0f);
  std::uint64_t checked = 0, differ = 0, near_zero = 0;
  for (int trial = 0; trial < 6000; ++trial) {
    float scale = floor_scale;
    if (trial % 50 != 0) {
      const std::uint32_t bits = static_cast<std::uint32_t>(next() & 0x7fffff) |
                                 (static_cast<std::uint32_t>(100 + next() % 60) << 23);
      float amax;
      std::memcpy(&amax, &bits, sizeof amax);
      scale = std::fmax(amax / 448.0f, floor_scale);
    }
    const float inverse = 1.0f / scale;
    for (std::uint32_t b = 0; b < 65536; ++b) {
      const std::uint32_t word = b << 16;
      float x;
      std::memcpy(&x, &word, sizeof x);
      if (!std::isfinite(x) || std::fabs(x) > 448.0f * scale) continue;
      const float want = x / scale;
      const float q = x * inverse;
      const float got = std::fma(std::fma(-q, scale, x), inverse, q);
      ++checked;
      if (std::memcmp(&want, &got, sizeof want) == 0) continue;
      if (std::fabs(want) >= 0x1p-11f) {
        ++differ;
      } else {
        ++near_zero;
      }
    }
  }
  CHECK(checked > 100000000u);
  CHECK(differ == 0);
  MESSAGE(checked << " pairs; " << near_zero << " differ below 2^-11 (both round to e4m3 zero)");
}

TEST_CASE("fp8 quant oracle: each captured case reads one recorded stories260K activation") {
  // The inputs of the model's attention projections that an FP8 W8A8 build quantizes
  // (tasks/capture): recorded shapes, recorded bytes.
  oracle_test::check_captured_cases(oracle_test::repository_task(kTaskId),
                                    "dynamic_per_token_scaled_fp8_quant", {}, true);
}

TEST_CASE("fp8 quant oracle: on every captured case, gives the recorded bytes and scales") {
  // The capture tool's quantizer (torch's float32 division and e4m3 conversion) is written apart
  // from this oracle: the same e4m3 bytes and the same float32 scales exactly.
  const std::size_t compared =
      oracle_test::compare_captured_cases(oracle_test::repository_task(kTaskId), {"out", "scale"});
  CHECK(compared == 27 * 64 + 27 + 4 * 64 + 4);
}
