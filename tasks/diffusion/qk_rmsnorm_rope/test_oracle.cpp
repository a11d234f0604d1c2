// The diffusion/qk_rmsnorm_rope oracle on hand-computed heads and on its own task's values.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "tasks/oracle.hpp"
#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

namespace {

using oracle_test::Tensors;

Tensors qk(std::int64_t batch, std::int64_t seq, std::int64_t heads, std::int64_t dim,
           std::vector<double> query, std::vector<double> key, std::vector<double> q_weight,
           std::vector<double> k_weight, std::vector<double> table, double epsilon) {
  return oracle_test::call_oracle(
      "diffusion/qk_rmsnorm_rope",
      {{"batch", batch}, {"seq_len", seq}, {"num_heads", heads}, {"head_dim", dim}},
      Tensors{
          {"query", {core::DType::kBF16, {batch, seq, heads, dim}, std::move(query)}},
          {"key", {core::DType::kBF16, {batch, seq, heads, dim}, std::move(key)}},
          {"q_weight", {core::DType::kBF16, {dim}, std::move(q_weight)}},
          {"k_weight", {core::DType::kBF16, {dim}, std::move(k_weight)}},
          {"cos_sin", {core::DType::kF32, {seq, dim}, std::move(table)}},
      },
      {{"epsilon", epsilon}});
}

}  // namespace

TEST_CASE("qk_rmsnorm_rope oracle: hand-computed head, interleaved pairs, own weight per tensor") {
  // One token, one head of 4: x = (1, 1, 1, 1) has rms 1 (epsilon 0). The query is scaled by
  // (1, 2, 3, 4), the key by (2, 2, 2, 2). Pair 0 is rotated by 90 degrees (c 0, t 1), pair 1 by
  // 0 (c 1, t 0): table row (c0, c1, t0, t1) = (0, 1, 1, 0).
  const Tensors out =
      qk(1, 1, 1, 4, {1, 1, 1, 1}, {1, 1, 1, 1}, {1, 2, 3, 4}, {2, 2, 2, 2}, {0, 1, 1, 0}, 0.0);
  const auto& q = out.at("query").values;
  const auto& k = out.at("key").values;
  // Pair (a, b) rotated by 90 degrees: (-b, a). Query n = (1, 2, 3, 4) -> (-2, 1, 3, 4).
  CHECK(q == std::vector<double>{-2, 1, 3, 4});
  CHECK(k == std::vector<double>{-2, 2, 2, 2});
}

TEST_CASE("qk_rmsnorm_rope oracle: the table row is the token's position within its sequence") {
  // Two samples of two tokens, one head of 2: row s of the table rotates token s of every
  // sample. Row 0: 180 degrees (c -1, t 0); row 1: 90 degrees (c 0, t 1).
  const Tensors out = qk(2, 2, 1, 2, {3, 4, 3, 4, 3, 4, 3, 4}, {0, 1, 0, 1, 0, 1, 0, 1}, {1, 1},
                         {1, 1}, {-1, 0, 0, 1}, 0.0);
  const auto& q = out.at("query").values;
  const auto& k = out.at("key").values;
  const double r = 1.0 / std::sqrt(12.5);  // rms of (3, 4)
  const std::vector<double> want_q = {-3 * r, -4 * r, -4 * r, 3 * r, -3 * r, -4 * r, -4 * r, 3 * r};
  const double s = std::sqrt(2.0);  // 1 / rms of (0, 1)
  const std::vector<double> want_k = {0, -s, -s, 0, 0, -s, -s, 0};
  for (int i = 0; i < 8; ++i) {
    CAPTURE(i);
    CHECK(q[i] == doctest::Approx(want_q[i]).epsilon(1e-15));
    CHECK(k[i] == doctest::Approx(want_k[i]).epsilon(1e-15));
  }
}

TEST_CASE("qk_rmsnorm_rope oracle: epsilon bounds the scale of tiny heads") {
  // x = (1e-3, 0): mean square 5e-7; with epsilon 1e-6 the scale is 1 / sqrt(1.5e-6), not
  // 1 / sqrt(5e-7) (the identity rotation keeps the normalised values).
  const Tensors out = qk(1, 1, 1, 2, {1e-3, 0}, {1e-3, 0}, {1, 1}, {1, 1}, {1, 0}, 1e-6);
  CHECK(out.at("query").values[0] == doctest::Approx(1e-3 / std::sqrt(1.5e-6)).epsilon(1e-12));
  CHECK(out.at("query").values[1] == 0.0);
}

TEST_CASE("qk_rmsnorm_rope oracle: on a generated case the rotation keeps each pair's norm") {
  // rope_cache rows hold cos and sin of real angles, so a rotated pair has the length of the
  // normalised pair: sum over a head of out^2 equals sum (x * inv_rms * w)^2.
  const tasks::Task& task = oracle_test::repository_task("diffusion/qk_rmsnorm_rope");
  const tasks::Case& c = oracle_test::case_named(task, "h_head_dim_98");
  const auto inputs = tasks::case_inputs(task, c, tasks::case_seed(c, 1));
  REQUIRE(inputs.ok());
  const Tensors out = oracle_test::run_case(task, c);
  const auto input = tasks::decode_values(core::DType::kBF16, inputs->at("query").data(),
                                          inputs->at("query").size() / 2);
  const auto& w = out.at("q_weight").values;
  const auto& q = out.at("query").values;
  const std::int64_t dim = c.symbols.at("head_dim");
  const std::int64_t rows = static_cast<std::int64_t>(q.size()) / dim;
  std::size_t bad = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    double squares = 0.0;
    for (std::int64_t i = 0; i < dim; ++i) squares += input[r * dim + i] * input[r * dim + i];
    const double inv_rms = 1.0 / std::sqrt(squares / static_cast<double>(dim) + 1e-6);
    for (std::int64_t k = 0; k < dim / 2; ++k) {
      const double a = input[r * dim + 2 * k] * inv_rms * w[2 * k];
      const double b = input[r * dim + 2 * k + 1] * inv_rms * w[2 * k + 1];
      const double before = a * a + b * b;
      const double after =
          q[r * dim + 2 * k] * q[r * dim + 2 * k] + q[r * dim + 2 * k + 1] * q[r * dim + 2 * k + 1];
      // The table is fp32: cos^2 + sin^2 is 1 within a few fp32 ulps.
      bad += std::abs(after - before) <= 1e-6 * (1.0 + before) ? 0 : 1;
    }
  }
  CHECK(rows == 45 * 6);
  CHECK(bad == 0);
}
