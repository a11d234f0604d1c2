// The diffusion/adaln_modulate oracle on hand-computed rows and on its own task's values.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "tasks/oracle.hpp"
#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

namespace {

using oracle_test::Tensors;

std::vector<double> adaln(std::int64_t batch, std::int64_t seq, std::int64_t hidden,
                          std::vector<double> input, std::vector<double> scale,
                          std::vector<double> shift, double epsilon) {
  const std::int64_t rows = batch * seq;
  return oracle_test::call_oracle(
             "diffusion/adaln_modulate",
             {{"batch", batch}, {"seq_len", seq}, {"hidden_size", hidden}},
             Tensors{
                 {"input", {core::DType::kBF16, {batch, seq, hidden}, std::move(input)}},
                 {"scale", {core::DType::kBF16, {batch, hidden}, std::move(scale)}},
                 {"shift", {core::DType::kBF16, {batch, hidden}, std::move(shift)}},
                 {"out",
                  {core::DType::kBF16, {batch, seq, hidden}, std::vector<double>(rows * hidden)}},
             },
             {{"epsilon", epsilon}})
      .at("out")
      .values;
}

}  // namespace

TEST_CASE("adaln_modulate oracle: hand-computed rows, each sample with its own scale and shift") {
  // Rows (1, 2, 3, 6) and (6, 3, 2, 1): mean 3, variance 3.5, epsilon 0.5 makes 1/std = 1/2,
  // normalised (-1, -0.5, 0, 1.5) and (1.5, 0, -0.5, -1).
  // Sample 0: scale (0, 1, -1, 0.5), shift (0, 0.25, 1, -3); sample 1: scale 0, shift 1.
  const auto out = adaln(2, 1, 4, {1, 2, 3, 6, 6, 3, 2, 1}, {0, 1, -1, 0.5, 0, 0, 0, 0},
                         {0, 0.25, 1, -3, 1, 1, 1, 1}, 0.5);
  REQUIRE(out.size() == 8);
  const std::vector<double> want = {-1.0, -0.75, 1.0, -0.75, 2.5, 1.0, 0.5, 0.0};
  for (int i = 0; i < 8; ++i) {
    CAPTURE(i);
    CHECK(out[i] == doctest::Approx(want[i]).epsilon(1e-15));
  }
}

TEST_CASE("adaln_modulate oracle: zero scale and shift give the plain LayerNorm, offset-free") {
  const std::vector<double> row = {0.5, -1.25, 2.0, 0.75, -0.5, 3.0};
  std::vector<double> shifted = row;
  for (double& v : shifted) v += 1000.0;
  const std::vector<double> zeros(6, 0.0);
  const auto a = adaln(1, 1, 6, row, zeros, zeros, 1e-6);
  const auto b = adaln(1, 1, 6, shifted, zeros, zeros, 1e-6);
  double mean = 0.0;
  double square = 0.0;
  for (int i = 0; i < 6; ++i) {
    CHECK(a[i] == doctest::Approx(b[i]).epsilon(1e-9));
    mean += a[i] / 6.0;
    square += a[i] * a[i] / 6.0;
  }
  CHECK(std::abs(mean) < 1e-12);
  CHECK(square == doctest::Approx(1.0).epsilon(1e-5));
}

TEST_CASE(
    "adaln_modulate oracle: on a generated case, token rows of a sample share its modulation") {
  // (out - shift[b]) / (1 + scale[b]) is the normalised row: mean 0 and variance ~1 on every row.
  const tasks::Task& task = oracle_test::repository_task("diffusion/adaln_modulate");
  const tasks::Case& c = oracle_test::case_named(task, "h_width_1000");
  const Tensors tensors = oracle_test::run_case(task, c);
  const auto& out = tensors.at("out").values;
  const auto& scale = tensors.at("scale").values;
  const auto& shift = tensors.at("shift").values;
  const std::int64_t batch = c.symbols.at("batch");
  const std::int64_t seq = c.symbols.at("seq_len");
  const std::int64_t hidden = c.symbols.at("hidden_size");
  std::size_t bad_rows = 0;
  std::size_t skipped = 0;
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t s = 0; s < seq; ++s) {
      double mean = 0.0;
      double square = 0.0;
      std::int64_t counted = 0;
      for (std::int64_t i = 0; i < hidden; ++i) {
        const double factor = 1.0 + scale[b * hidden + i];
        if (std::abs(factor) < 1e-3) {
          ++skipped;
          continue;
        }
        const double z = (out[(b * seq + s) * hidden + i] - shift[b * hidden + i]) / factor;
        mean += z;
        square += z * z;
        ++counted;
      }
      // Skipped columns (1 + scale ~ 0) leave a partial row: allow its sampling error.
      mean /= static_cast<double>(counted);
      square /= static_cast<double>(counted);
      bad_rows += (std::abs(mean) < 0.2 && std::abs(square - 1.0) < 0.2) ? 0 : 1;
    }
  }
  CHECK(bad_rows == 0);
  CHECK(skipped < static_cast<std::size_t>(batch * seq * 10));
}
