// The ssm/fused_recurrent_gated_delta_rule oracle on a hand-computed step, the in-kernel
// normalisation, the key-head-to-value-head mapping, and the malformed calls it refuses.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

namespace {

const std::string kTask = "ssm/fused_recurrent_gated_delta_rule";

struct Step {
  std::int64_t k_heads, v_heads, kdim, vdim, cache_lines;
  std::vector<double> q, k, v, g, beta, state, lines;
  double scale = 1.0;
  double l2norm = 0.0;
};

oracle_test::Tensors tensors_of(const Step& s) {
  const auto seqs = static_cast<std::int64_t>(s.lines.size());
  return {
      {"q", {core::DType::kBF16, {seqs, s.k_heads, s.kdim}, s.q}},
      {"k", {core::DType::kBF16, {seqs, s.k_heads, s.kdim}, s.k}},
      {"v", {core::DType::kBF16, {seqs, s.v_heads, s.vdim}, s.v}},
      {"g", {core::DType::kF32, {seqs, s.v_heads}, s.g}},
      {"beta", {core::DType::kBF16, {seqs, s.v_heads}, s.beta}},
      {"initial_state", {core::DType::kF32, {s.cache_lines, s.v_heads, s.kdim, s.vdim}, s.state}},
      {"ssm_state_indices", {core::DType::kI32, {seqs}, s.lines}},
      {"o",
       {core::DType::kBF16,
        {seqs, s.v_heads, s.vdim},
        std::vector<double>(static_cast<std::size_t>(seqs * s.v_heads * s.vdim), 0.0)}},
  };
}

std::map<std::string, std::int64_t> symbols_of(const Step& s) {
  return {{"num_seqs", static_cast<std::int64_t>(s.lines.size())},
          {"num_k_heads", s.k_heads},
          {"num_v_heads", s.v_heads},
          {"head_k_dim", s.kdim},
          {"head_v_dim", s.vdim},
          {"num_cache_lines", s.cache_lines}};
}

std::map<std::string, double> scalars_of(const Step& s) {
  return {{"scale", s.scale}, {"use_qk_l2norm_in_kernel", s.l2norm}};
}

oracle_test::Tensors step(const Step& s) {
  return oracle_test::call_oracle(kTask, symbols_of(s), tensors_of(s), scalars_of(s));
}

bool accepts(const Step& s) {
  auto tensors = tensors_of(s);
  return oracle_test::oracle_status(kTask, symbols_of(s), tensors, scalars_of(s)).ok();
}

// One sequence on line 1 of 2, one head, K = V = 2, no normalisation, scale 1.
// Line 1 holds S = [[1, 2], [3, 4]] (rows are key index i); exp(g) = 1/2 halves it.
// k = (1, 0), q = (0, 1), beta = 1/2, v = (2, 2):
//   S^T k = (0.5, 1), u = 0.5 ((2, 2) - (0.5, 1)) = (0.75, 0.5),
//   S = [[0.5 + 0.75, 1 + 0.5], [1.5, 2]] = [[1.25, 1.5], [1.5, 2]], o = S^T q = (1.5, 2).
Step hand_step() {
  Step s{1, 1, 2, 2, 2, {0, 1}, {1, 0}, {2, 2}, {std::log(0.5)}, {0.5}, {}, {1}};
  s.state = {9, 9, 9, 9, 1, 2, 3, 4};
  return s;
}

}  // namespace

TEST_CASE("fused_recurrent_gated_delta_rule oracle: a hand-computed step") {
  const auto result = step(hand_step());
  const auto& state = result.at("initial_state").values;
  CHECK(std::vector<double>(state.begin(), state.begin() + 4) == std::vector<double>(4, 9.0));
  CHECK(state[4] == doctest::Approx(1.25).epsilon(1e-15));
  CHECK(state[5] == doctest::Approx(1.5).epsilon(1e-15));
  CHECK(state[6] == doctest::Approx(1.5).epsilon(1e-15));
  CHECK(state[7] == doctest::Approx(2.0).epsilon(1e-15));
  const auto& out = result.at("o").values;
  CHECK(out[0] == doctest::Approx(1.5).epsilon(1e-15));
  CHECK(out[1] == doctest::Approx(2.0).epsilon(1e-15));
}

TEST_CASE("fused_recurrent_gated_delta_rule oracle: the scale multiplies the read-out only") {
  Step s = hand_step();
  s.scale = 0.25;
  const auto result = step(s);
  CHECK(result.at("initial_state").values[4] == doctest::Approx(1.25).epsilon(1e-15));
  CHECK(result.at("o").values[0] == doctest::Approx(1.5 * 0.25).epsilon(1e-15));
  CHECK(result.at("o").values[1] == doctest::Approx(2.0 * 0.25).epsilon(1e-15));
}

TEST_CASE("fused_recurrent_gated_delta_rule oracle: in-kernel normalisation divides by the norm") {
  // q = (0, 3), k = (4, 0) normalised (with the 1e-6 under the root) are the hand step's q and k
  // up to 1e-7; the state and output follow.
  Step s = hand_step();
  s.q = {0, 3};
  s.k = {4, 0};
  s.l2norm = 1.0;
  const auto result = step(s);
  const double kn = 4.0 / std::sqrt(16.0 + 1e-6), qn = 3.0 / std::sqrt(9.0 + 1e-6);
  // S^T k_ = kn (0.5, 1); u = 0.5 ((2, 2) - kn (0.5, 1)); row 0 = (0.5, 1) + kn u.
  const double u0 = 0.5 * (2 - kn * 0.5), u1 = 0.5 * (2 - kn * 1.0);
  const auto& state = result.at("initial_state").values;
  CHECK(state[4] == doctest::Approx(0.5 + kn * u0).epsilon(1e-14));
  CHECK(state[5] == doctest::Approx(1.0 + kn * u1).epsilon(1e-14));
  CHECK(result.at("o").values[0] == doctest::Approx(qn * 1.5).epsilon(1e-14));
  // The same q and k without the normalisation: a different step.
  s.l2norm = 0.0;
  const auto raw = step(s);
  CHECK(raw.at("o").values[0] != doctest::Approx(result.at("o").values[0]).epsilon(1e-3));
}

TEST_CASE("fused_recurrent_gated_delta_rule oracle: value heads read their own key head") {
  // Two key heads, four value heads: value heads 0, 1 read key head 0 (k = (1, 0)), heads 2, 3
  // key head 1 (k = (0, 1)); zero state, beta 1, v = (1, 1): the state becomes k v^T, so
  // the nonzero row is row 0 for heads 0, 1 and row 1 for heads 2, 3.
  Step s{2,
         4,
         2,
         2,
         1,
         {1, 0, 0, 1},
         {1, 0, 0, 1},
         std::vector<double>(8, 1.0),
         std::vector<double>(4, 0.0),
         std::vector<double>(4, 1.0),
         std::vector<double>(16, 0.0),
         {0}};
  const auto result = step(s);
  const auto& state = result.at("initial_state").values;
  const std::vector<double> row0 = {1, 1, 0, 0}, row1 = {0, 0, 1, 1};
  for (int hv = 0; hv < 4; ++hv) {
    const std::vector<double> head(state.begin() + hv * 4, state.begin() + hv * 4 + 4);
    CHECK_MESSAGE(head == (hv < 2 ? row0 : row1), "value head " << hv);
  }
  // q = k: o = S^T k = v for every head.
  for (const double v : result.at("o").values) CHECK(v == 1.0);
}

TEST_CASE("fused_recurrent_gated_delta_rule oracle: refuses ungrouped heads and bad lines") {
  CHECK(accepts(hand_step()));
  Step outside = hand_step();
  outside.lines = {2};
  CHECK_FALSE(accepts(outside));
  Step three{2,
             3,
             2,
             2,
             2,
             {0, 1, 0, 1},
             {1, 0, 1, 0},
             std::vector<double>(6, 1.0),
             std::vector<double>(3, 0.0),
             std::vector<double>(3, 1.0),
             std::vector<double>(24, 0.0),
             {0}};
  CHECK_FALSE(accepts(three));
  Step shared = hand_step();
  shared.q = {0, 1, 0, 1};
  shared.k = {1, 0, 1, 0};
  shared.v = {2, 2, 2, 2};
  shared.g = {0, 0};
  shared.beta = {1, 1};
  shared.lines = {1, 1};
  CHECK_FALSE(accepts(shared));
}

TEST_CASE("fused_recurrent_gated_delta_rule: every case fits the kernel's stated guarantees") {
  const tasks::Task& task = oracle_test::repository_task(kTask);
  for (const auto& c : task.cases) {
    const auto& lines = c.values.at("ssm_state_indices");
    CHECK_MESSAGE(lines.kind == tasks::GeneratorKind::kPermutation, c.name);
    CHECK_MESSAGE(lines.max <= c.symbols.at("num_cache_lines"), c.name);
    CHECK_MESSAGE(lines.max >= c.symbols.at("num_seqs"), c.name);
    CHECK_MESSAGE(c.symbols.at("num_v_heads") % c.symbols.at("num_k_heads") == 0, c.name);
    CHECK_MESSAGE(c.symbols.at("head_v_dim") % 4 == 0, c.name);
    CHECK_MESSAGE(c.symbols.at("head_k_dim") <= 256, c.name);
  }
}

TEST_CASE("fused_recurrent_gated_delta_rule oracle: strong decay stays finite") {
  const tasks::Task& task = oracle_test::repository_task(kTask);
  const auto tensors = oracle_test::run_case(task, oracle_test::case_named(task, "h_strong_decay"));
  for (const double v : tensors.at("o").values) REQUIRE(std::isfinite(v));
  for (const double v : tensors.at("initial_state").values) REQUIRE(std::isfinite(v));
}
