// The multimodal/layer_norm oracle on hand-computed rows and on its own task's values.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "tasks/oracle.hpp"
#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

namespace {

using oracle_test::Tensors;

std::vector<double> layer_norm(std::int64_t rows, std::int64_t hidden, std::vector<double> input,
                               std::vector<double> weight, std::vector<double> bias,
                               double epsilon) {
  return oracle_test::call_oracle(
             "multimodal/layer_norm", {{"num_tokens", rows}, {"hidden_size", hidden}},
             Tensors{
                 {"input", {core::DType::kBF16, {rows, hidden}, std::move(input)}},
                 {"weight", {core::DType::kBF16, {hidden}, std::move(weight)}},
                 {"bias", {core::DType::kBF16, {hidden}, std::move(bias)}},
                 {"out", {core::DType::kBF16, {rows, hidden}, std::vector<double>(rows * hidden)}},
             },
             {{"epsilon", epsilon}})
      .at("out")
      .values;
}

}  // namespace

TEST_CASE("layer_norm oracle: hand-computed row, biased variance, weight then bias") {
  // Row (1, 2, 3, 6): mean 3, centred (-2, -1, 0, 3), variance (4 + 1 + 0 + 9) / 4 = 3.5.
  const double inv_std = 1.0 / std::sqrt(3.5 + 0.5);  // epsilon 0.5 makes it exactly 1/2
  const auto out = layer_norm(1, 4, {1, 2, 3, 6}, {1, 2, -1, 0.5}, {0, 0.25, 1, -3}, 0.5);
  REQUIRE(out.size() == 4);
  CHECK(inv_std == 0.5);
  CHECK(out[0] == doctest::Approx(-1.0).epsilon(1e-15));
  CHECK(out[1] == doctest::Approx(-0.75).epsilon(1e-15));
  CHECK(out[2] == doctest::Approx(1.0).epsilon(1e-15));
  CHECK(out[3] == doctest::Approx(-2.25).epsilon(1e-15));
}

TEST_CASE("layer_norm oracle: invariant to a common offset of the row, which RMSNorm is not") {
  const std::vector<double> row = {0.5, -1.25, 2.0, 0.75, -0.5, 3.0};
  std::vector<double> shifted = row;
  for (double& v : shifted) v += 1000.0;
  const std::vector<double> ones(6, 1.0);
  const std::vector<double> zeros(6, 0.0);
  const auto a = layer_norm(1, 6, row, ones, zeros, 1e-6);
  const auto b = layer_norm(1, 6, shifted, ones, zeros, 1e-6);
  double mean = 0.0;
  double square = 0.0;
  for (int i = 0; i < 6; ++i) {
    CHECK(a[i] == doctest::Approx(b[i]).epsilon(1e-9));
    mean += a[i] / 6.0;
    square += a[i] * a[i] / 6.0;
  }
  CHECK(std::abs(mean) < 1e-12);
  CHECK(square == doctest::Approx(1.0).epsilon(1e-5));  // unit variance up to epsilon
}

TEST_CASE("layer_norm oracle: on a generated case every row has the weight's and bias's moments") {
  // With unit weight removed, (out - bias) / weight is the normalised row: mean 0, variance ~1.
  const tasks::Task& task = oracle_test::repository_task("multimodal/layer_norm");
  const tasks::Case& c = oracle_test::case_named(task, "h_width_771");
  const Tensors tensors = oracle_test::run_case(task, c);
  const auto& out = tensors.at("out").values;
  const auto& weight = tensors.at("weight").values;
  const auto& bias = tensors.at("bias").values;
  const std::int64_t rows = c.symbols.at("num_tokens");
  const std::int64_t hidden = c.symbols.at("hidden_size");
  std::size_t bad_rows = 0;
  for (std::int64_t t = 0; t < rows; ++t) {
    double mean = 0.0;
    double square = 0.0;
    for (std::int64_t i = 0; i < hidden; ++i) {
      const double z = (out[t * hidden + i] - bias[i]) / weight[i];
      mean += z / static_cast<double>(hidden);
      square += z * z / static_cast<double>(hidden);
    }
    bad_rows += (std::abs(mean) < 1e-9 && std::abs(square - 1.0) < 1e-4) ? 0 : 1;
  }
  CHECK(bad_rows == 0);
}
