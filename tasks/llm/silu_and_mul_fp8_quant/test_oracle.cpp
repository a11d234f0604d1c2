// The llm/silu_and_mul_fp8_quant oracle on hand-computed values, on its own task's values and on
// the recorded stories260K activations.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "tasks/oracle.hpp"
#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

namespace {

constexpr const char* kTaskId = "llm/silu_and_mul_fp8_quant";

// One row: gate values, then up values (d of each), quantized with `scale`.
std::vector<double> run_row(std::vector<double> gate, const std::vector<double>& up, double scale) {
  const auto d = static_cast<std::int64_t>(gate.size());
  gate.insert(gate.end(), up.begin(), up.end());
  auto tensors = oracle_test::call_oracle(
      kTaskId, {{"num_tokens", 1}, {"d", d}},
      oracle_test::Tensors{
          {"input", {core::DType::kBF16, {1, 2, d}, std::move(gate)}},
          {"scale", {core::DType::kF32, {1}, {scale}}},
          {"result", {core::DType::kFP8E4M3, {1, d}, std::vector<double>(d, 0.0)}},
      });
  return tensors["result"].values;
}

double silu(double g) { return g / (1.0 + std::exp(-g)); }

}  // namespace

TEST_CASE("silu_and_mul_fp8_quant oracle: silu(gate) * up / scale, rounded to e4m3") {
  // silu(0) = 0; silu(2) * 3 / 0.25 = 21.14 -> 22 (step 2 in [16, 32), 21.14 nearer 22);
  // silu(-1) * 4 / 0.25 = -4.30 -> -4.5 (step 0.5 in [4, 8)); silu(1) * 0.5 / 0.25 = 1.462 ->
  // 1.5 (step 0.125 in [1, 2)).
  const auto y = run_row({0.0, 2.0, -1.0, 1.0}, {5.0, 3.0, 4.0, 0.5}, 0.25);
  CHECK(silu(2.0) * 12.0 == doctest::Approx(21.1391).epsilon(1e-5));
  CHECK(y == std::vector<double>{0.0, 22.0, -4.5, 1.5});
}

TEST_CASE("silu_and_mul_fp8_quant oracle: saturates at +-448 and flushes tiny values") {
  // 100 * 100 / 1 saturates; silu(-100) * 1 is about -3.7e-42: zero (negative zero compares
  // equal); silu(1) * 2^-10 / 1 = 7.1e-4 is below half the least subnormal 2^-9: 0;
  // silu(30) * 2^-12 = 3.75 steps of 2^-9 (just under) rounds to 4 steps, the subnormal 2^-7.
  const auto y = run_row({100.0, -100.0, 1.0, 30.0}, {100.0, 1.0, 0x1p-10, 0x1p-12}, 1.0);
  CHECK(y[0] == 448.0);
  CHECK(y[1] == 0.0);
  CHECK(y[2] == 0.0);
  CHECK(y[3] == 0x1p-7);
  // And the negative side saturates too.
  CHECK(run_row({100.0}, {-100.0}, 1.0)[0] == -448.0);
}

TEST_CASE(
    "silu_and_mul_fp8_quant oracle: on generated and captured cases every output is an e4m3 "
    "value within half a step of the exact quotient") {
  const tasks::Task& task = oracle_test::repository_task(kTaskId);
  for (const char* name : {"h_tokens_7", "h_width_1001", "h_saturating_scale", "h_captured_prefill",
                           "h_captured_decode"}) {
    CAPTURE(name);
    const tasks::Case& c = oracle_test::case_named(task, name);
    const oracle_test::Tensors tensors = oracle_test::run_case(task, c);
    const auto& x = tensors.at("input").values;
    const auto& y = tensors.at("result").values;
    const double s = tensors.at("scale").values.at(0);
    const std::int64_t rows = c.symbols.at("num_tokens");
    const std::int64_t d = c.symbols.at("d");
    std::size_t not_e4m3 = 0, too_far = 0, saturated = 0, nonzero = 0;
    for (std::int64_t t = 0; t < rows; ++t) {
      for (std::int64_t i = 0; i < d; ++i) {
        const double q = y[t * d + i];
        not_e4m3 += tasks::round_to_dtype(core::DType::kFP8E4M3, q) == q ? 0 : 1;
        const double exact = silu(x[t * 2 * d + i]) * x[t * 2 * d + d + i] / s;
        const double clamped = std::fmax(-448.0, std::fmin(448.0, exact));
        const double bound = std::fmax(std::abs(clamped) * 0x1p-4, 0x1p-10) * (1.0 + 1e-6);
        too_far += std::abs(q - clamped) <= bound ? 0 : 1;
        saturated += std::abs(q) == 448.0 ? 1 : 0;
        nonzero += q != 0.0 ? 1 : 0;
      }
    }
    CHECK(not_e4m3 == 0);
    CHECK(too_far == 0);
    // Real and generated activations both give mostly nonzero outputs at these scales.
    CHECK(nonzero > static_cast<std::size_t>(rows * d) / 2);
    if (std::string(name) == "h_saturating_scale") CHECK(saturated > 0);
  }
}
