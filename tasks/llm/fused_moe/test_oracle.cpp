// The llm/fused_moe oracle on hand-computed experts, on properties of the routing-weighted sum,
// and on its task's generated cases against a direct recomputation.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tasks/oracle.hpp"
#include "tasks/registry.hpp"
#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

namespace {

using oracle_test::Tensors;

const std::string kTask = "llm/fused_moe";
// silu(ln 3) = ln 3 / (1 + 1/3) = 0.75 ln 3 and silu(-ln 3) = -ln 3 / (1 + 3) = -ln 3 / 4.
const double kLn3 = std::log(3.0);

struct Shape {
  std::int64_t tokens, hidden, inter, experts, topk;
};

std::map<std::string, std::int64_t> symbols(const Shape& s) {
  return {{"num_tokens", s.tokens},      {"hidden_size", s.hidden},  {"intermediate_size", s.inter},
          {"gate_up_size", 2 * s.inter}, {"num_experts", s.experts}, {"topk", s.topk}};
}

Tensors tensors(const Shape& s, std::vector<double> x, std::vector<double> w1,
                std::vector<double> w2, std::vector<double> weights, std::vector<double> ids) {
  return Tensors{
      {"out",
       {core::DType::kBF16,
        {s.tokens, s.hidden},
        std::vector<double>(static_cast<std::size_t>(s.tokens * s.hidden))}},
      {"hidden_states", {core::DType::kBF16, {s.tokens, s.hidden}, std::move(x)}},
      {"w1", {core::DType::kBF16, {s.experts, 2 * s.inter, s.hidden}, std::move(w1)}},
      {"w2", {core::DType::kBF16, {s.experts, s.hidden, s.inter}, std::move(w2)}},
      {"topk_weights", {core::DType::kF32, {s.tokens, s.topk}, std::move(weights)}},
      {"topk_ids", {core::DType::kI32, {s.tokens, s.topk}, std::move(ids)}},
  };
}

std::vector<double> run_moe(const Shape& s, std::vector<double> x, std::vector<double> w1,
                            std::vector<double> w2, std::vector<double> weights,
                            std::vector<double> ids) {
  return oracle_test::call_oracle(kTask, symbols(s),
                                  tensors(s, std::move(x), std::move(w1), std::move(w2),
                                          std::move(weights), std::move(ids)))
      .at("out")
      .values;
}

// Deterministic values of unit scale, different for every (seed, i).
std::vector<double> values(std::size_t n, double seed) {
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::sin(seed + 1.7 * static_cast<double>(i));
  return v;
}

}  // namespace

TEST_CASE("fused_moe oracle: two tokens, top-2 of three experts, gate rows before up rows") {
  // hidden 2, intermediate 1: w1[e] = (gate row; up row), w2[e] a column of 2.
  //   e0: gate (ln3, 0), up (0, 1), w2 (1, -1)
  //   e1: gate (0, ln3), up (2, 0), w2 (0.5, 4)
  //   e2: gate (1, 1),   up (1, -1), w2 (3, 0)
  // Token 0: x = (1, 1), experts (1, 0), weights (0.25, 0.75).
  //   e1: g = ln3, u = 2: a = 0.75 ln3 * 2 = 1.5 ln3, y = (0.75 ln3, 6 ln3)
  //   e0: g = ln3, u = 1: a = 0.75 ln3,             y = (0.75 ln3, -0.75 ln3)
  //   out = 0.25 y1 + 0.75 y0 = (0.75 ln3, 0.9375 ln3) = (0.823959..., 1.029949...)
  // Token 1: x = (2, -1), experts (2, 1), weights (0.5, 0.25).
  //   e2: g = 1, u = 3: a = 3 silu(1) = 3 * 0.7310585786300049, y = (9 silu(1), 0)
  //   e1: g = -ln3, u = 4: a = -ln3 / 4 * 4 = -ln3, y = (-0.5 ln3, -4 ln3)
  //   out = (4.5 silu(1) - 0.125 ln3, -ln3) = (3.1524370677515083, -1.0986122886681098)
  const auto out =
      run_moe({2, 2, 1, 3, 2}, {1, 1, 2, -1}, {kLn3, 0, 0, 1, 0, kLn3, 2, 0, 1, 1, 1, -1},
              {1, -1, 0.5, 4, 3, 0}, {0.25, 0.75, 0.5, 0.25}, {1, 0, 2, 1});
  REQUIRE(out.size() == 4);
  CHECK(out[0] == doctest::Approx(0.75 * kLn3).epsilon(1e-12));
  CHECK(out[1] == doctest::Approx(0.9375 * kLn3).epsilon(1e-12));
  CHECK(out[2] == doctest::Approx(3.1524370677515083).epsilon(1e-12));
  CHECK(out[3] == doctest::Approx(-kLn3).epsilon(1e-12));
}

TEST_CASE("fused_moe oracle: w2 is [hidden, intermediate], one row per output feature") {
  // hidden 2, intermediate 2, one expert, top-1 with weight 0.5; x = (1, 0) picks w1's first
  // column: g = (ln3, -ln3), u = (4, 8), so a = (0.75 ln3 * 4, -ln3 / 4 * 8) = (3 ln3, -2 ln3).
  // w2 = [[1, 2], [3, 1]]: y = (3 - 4, 9 - 2) ln3 = (-ln3, 7 ln3); out = 0.5 y. (Read as
  // [intermediate, hidden] it would be (-3 ln3, 4 ln3) / 2.)
  const auto out = run_moe({1, 2, 2, 1, 1}, {1, 0}, {kLn3, 100, -kLn3, -7, 4, 9, 8, 1},
                           {1, 2, 3, 1}, {0.5}, {0});
  REQUIRE(out.size() == 2);
  CHECK(out[0] == doctest::Approx(-0.5 * kLn3).epsilon(1e-12));
  CHECK(out[1] == doctest::Approx(3.5 * kLn3).epsilon(1e-12));
}

TEST_CASE(
    "fused_moe oracle: a zero weight or a zero expert adds nothing; slot order does not matter") {
  // hidden 4, intermediate 3, four experts; expert 3's w1 is zero (g = u = 0, so a = 0) while its
  // w2 is not.
  const Shape three{1, 4, 3, 4, 3};
  const Shape two{1, 4, 3, 4, 2};
  const std::vector<double> x = values(4, 0.3);
  std::vector<double> w1 = values(4 * 6 * 4, 1.1);
  std::fill(w1.begin() + 3 * 6 * 4, w1.end(), 0.0);
  const std::vector<double> w2 = values(4 * 4 * 3, 2.9);

  // Weight 0 on the middle slot: the other two slots alone, bit for bit.
  const auto zero_weight = run_moe(three, x, w1, w2, {0.3, 0.0, 0.6}, {0, 1, 2});
  const auto without = run_moe(two, x, w1, w2, {0.3, 0.6}, {0, 2});
  CHECK(zero_weight == without);
  CHECK(std::any_of(without.begin(), without.end(), [](double v) { return v != 0.0; }));

  // Expert 3 (zero gate and up rows) under a large weight: again the other slots alone.
  const auto zero_expert = run_moe(three, x, w1, w2, {0.9, 0.2, 0.4}, {3, 1, 0});
  const auto others = run_moe(two, x, w1, w2, {0.2, 0.4}, {1, 0});
  CHECK(zero_expert == others);

  // The same (expert, weight) pairs in another slot order: the same sum up to rounding.
  const auto forward = run_moe(three, x, w1, w2, {0.3, 0.5, 0.6}, {0, 1, 2});
  const auto rotated = run_moe(three, x, w1, w2, {0.6, 0.3, 0.5}, {2, 0, 1});
  REQUIRE(forward.size() == rotated.size());
  for (std::size_t i = 0; i < forward.size(); ++i) {
    CAPTURE(i);
    CHECK(std::abs(forward[i] - rotated[i]) <= 1e-12 * (1.0 + std::abs(forward[i])));
  }
  // ... which is not the sum with the weights left in place (the pairing is what counts).
  const auto mismatched = run_moe(three, x, w1, w2, {0.3, 0.5, 0.6}, {2, 0, 1});
  CHECK(std::abs(mismatched[0] - forward[0]) > 1e-6);
}

TEST_CASE("fused_moe oracle: an expert id outside [0, num_experts) is refused") {
  const Shape s{1, 2, 1, 2, 2};
  for (const double bad : {2.0, -1.0}) {
    CAPTURE(bad);
    Tensors t =
        tensors(s, {1, 1}, values(2 * 2 * 2, 0.5), values(2 * 2, 0.7), {0.5, 0.5}, {0, bad});
    const core::Status status = oracle_test::oracle_status(kTask, symbols(s), t);
    CHECK_FALSE(status.ok());
  }
  Tensors good = tensors(s, {1, 1}, values(2 * 2 * 2, 0.5), values(2 * 2, 0.7), {0.5, 0.5}, {0, 1});
  CHECK(oracle_test::oracle_status(kTask, symbols(s), good).ok());
}

TEST_CASE("fused_moe oracle: on generated cases each sampled output matches a direct sum") {
  const tasks::Task& task = oracle_test::repository_task(kTask);
  for (const char* name : {"h_tokens_7", "h_tokens_3_experts_64"}) {
    CAPTURE(name);
    const tasks::Case& c = oracle_test::case_named(task, name);
    const Tensors tensors = oracle_test::run_case(task, c);
    const std::int64_t tokens = c.symbols.at("num_tokens");
    const std::int64_t hidden = c.symbols.at("hidden_size");
    const std::int64_t inter = c.symbols.at("intermediate_size");
    const std::int64_t experts = c.symbols.at("num_experts");
    const std::int64_t k = c.symbols.at("topk");
    const auto& x = tensors.at("hidden_states").values;
    const auto& w1 = tensors.at("w1").values;
    const auto& w2 = tensors.at("w2").values;
    const auto& weights = tensors.at("topk_weights").values;
    const auto& ids = tensors.at("topk_ids").values;
    const auto& out = tensors.at("out").values;

    std::size_t bad = 0, sampled = 0;
    double largest = 0.0;
    for (std::int64_t t = 0; t < tokens; ++t) {
      // The generator's routing: distinct experts in range.
      std::set<double> row(ids.begin() + t * k, ids.begin() + (t + 1) * k);
      CHECK(static_cast<std::int64_t>(row.size()) == k);
      CHECK(*row.begin() >= 0.0);
      CHECK(*row.rbegin() < static_cast<double>(experts));
      // Each slot's activation, the products summed column by column of w1 (the hidden index
      // outermost) rather than row by row as the oracle does.
      std::vector<std::vector<double>> a(static_cast<std::size_t>(k));
      for (std::int64_t j = 0; j < k; ++j) {
        const auto e = static_cast<std::int64_t>(ids[t * k + j]);
        std::vector<double> gate(static_cast<std::size_t>(inter), 0.0), up(gate);
        for (std::int64_t i = 0; i < hidden; ++i) {
          for (std::int64_t n = 0; n < inter; ++n) {
            gate[n] += w1[(e * 2 * inter + n) * hidden + i] * x[t * hidden + i];
            up[n] += w1[(e * 2 * inter + inter + n) * hidden + i] * x[t * hidden + i];
          }
        }
        for (std::int64_t n = 0; n < inter; ++n) {
          a[j].push_back(gate[n] / (1.0 + std::exp(-gate[n])) * up[n]);
        }
      }
      for (std::int64_t h = t % 5; h < hidden; h += 23) {
        double want = 0.0;
        for (std::int64_t j = k - 1; j >= 0; --j) {
          const auto e = static_cast<std::int64_t>(ids[t * k + j]);
          double y = 0.0;
          for (std::int64_t n = 0; n < inter; ++n) y += w2[(e * hidden + h) * inter + n] * a[j][n];
          want += weights[t * k + j] * y;
        }
        const double got = out[t * hidden + h];
        bad += std::abs(got - want) <= 1e-12 * (1.0 + std::abs(want)) ? 0 : 1;
        largest = std::max(largest, std::abs(want));
        ++sampled;
      }
    }
    CHECK(sampled >= static_cast<std::size_t>(tokens * (hidden / 23)));
    CHECK(bad == 0);
    // Outputs of about unit scale (the manifest's w2 scaling), not a degenerate all-zero case.
    CHECK(largest > 0.1);
  }
}
