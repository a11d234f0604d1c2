// The multimodal/gelu_tanh_and_mul oracle on hand-computed rows and on its own task's values.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "tasks/oracle.hpp"
#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

namespace {

using oracle_test::Tensors;

// Runs the oracle on `rows` rows of width d; `input` holds [gate | up] per row.
std::vector<double> run_oracle(std::int64_t rows, std::int64_t d, std::vector<double> input) {
  return oracle_test::call_oracle(
             "multimodal/gelu_tanh_and_mul", {{"num_tokens", rows}, {"d", d}},
             Tensors{
                 {"input", {core::DType::kBF16, {rows, 2, d}, std::move(input)}},
                 {"out", {core::DType::kBF16, {rows, d}, std::vector<double>(rows * d, 0.0)}},
             })
      .at("out")
      .values;
}

}  // namespace

TEST_CASE("gelu_tanh_and_mul oracle: hand-computed values, gate half first, the tanh form") {
  // gelu_tanh(1) = 0.5 * (1 + tanh(sqrt(2/pi) * 1.044715)) = 0.8411919906082768;
  // gelu_tanh(-1) = -1 + gelu_tanh(1) (gelu(x) - gelu(-x) = x for the tanh form too);
  // gelu_tanh(0) = 0.
  const auto out = run_oracle(2, 2, {1.0, 0.0, 3.0, 5.0, -1.0, 2.0, 2.0, 0.5});
  REQUIRE(out.size() == 4);
  CHECK(out[0] == doctest::Approx(3.0 * 0.8411919906082768).epsilon(1e-13));
  CHECK(out[1] == 0.0);
  CHECK(out[2] == doctest::Approx(2.0 * (0.8411919906082768 - 1.0)).epsilon(1e-12));
  // gelu_tanh(2) = 0.5 * 2 * (1 + tanh(sqrt(2/pi) * 2.35772)), tanh(...) = 0.9545976940877751.
  CHECK(out[3] == doctest::Approx(1.954597694087775 * 0.5).epsilon(1e-12));
}

TEST_CASE("gelu_tanh_and_mul oracle: differs from the exact erf GELU by about 4e-4 at g = -3") {
  // The task's tolerance rejects the erf form: this is the gap it relies on.
  const auto out = run_oracle(1, 1, {-3.0, 1.0});
  const double erf_gelu = -3.0 * 0.5 * std::erfc(3.0 / std::sqrt(2.0));
  CHECK(out[0] == doctest::Approx(-0.0036373920817).epsilon(1e-9));
  CHECK(std::abs(out[0] - erf_gelu) > 3.5e-4);
  CHECK(std::abs(out[0] - erf_gelu) < 4.5e-4);
}

TEST_CASE("gelu_tanh_and_mul oracle: saturates to the gate above and to -0 far below, no NaN") {
  const auto out = run_oracle(1, 3, {40.0, -40.0, -1000.0, 1.0, 1.0, 1.0});
  CHECK(out[0] == doctest::Approx(40.0).epsilon(1e-15));
  CHECK(std::abs(out[1]) < 1e-15);
  CHECK(out[2] == 0.0);
  CHECK_FALSE(std::isnan(out[2]));
}

TEST_CASE("gelu_tanh_and_mul oracle: on a generated case every output is g * sigmoid(2z) * u") {
  const tasks::Task& task = oracle_test::repository_task("multimodal/gelu_tanh_and_mul");
  const tasks::Case& c = oracle_test::case_named(task, "h_width_1001");
  const Tensors tensors = oracle_test::run_case(task, c);
  const auto& input = tensors.at("input").values;
  const auto& out = tensors.at("out").values;
  const std::int64_t rows = c.symbols.at("num_tokens");
  const std::int64_t d = c.symbols.at("d");
  REQUIRE(out.size() == static_cast<std::size_t>(rows * d));
  std::size_t wrong = 0;
  for (std::int64_t t = 0; t < rows; ++t) {
    for (std::int64_t i = 0; i < d; ++i) {
      const double g = input[t * 2 * d + i];
      const double u = input[t * 2 * d + d + i];
      // 0.5 (1 + tanh(z)) = sigmoid(2z): the same function written the other way.
      const double z = 0.7978845608028654 * (g + 0.044715 * g * g * g);
      const double expected = g / (1.0 + std::exp(-2.0 * z)) * u;
      wrong += std::abs(out[t * d + i] - expected) <= 1e-12 * (1.0 + std::abs(expected)) ? 0 : 1;
    }
  }
  CHECK(wrong == 0);
}
