// The ssm/selective_state_update oracle on hand-computed heads (softplus below and above its
// threshold), the head-to-group mapping, and the malformed calls it refuses.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

namespace {

const std::string kTask = "ssm/selective_state_update";

struct Step {
  std::int64_t heads, headdim, dstate, groups, cache_lines;
  std::vector<double> state, x, dt, a, b, c, d, dt_bias, lines;
};

oracle_test::Tensors tensors_of(const Step& s) {
  const auto seqs = static_cast<std::int64_t>(s.lines.size());
  return {
      {"state", {core::DType::kF32, {s.cache_lines, s.heads, s.headdim, s.dstate}, s.state}},
      {"x", {core::DType::kBF16, {seqs, s.heads, s.headdim}, s.x}},
      {"dt", {core::DType::kBF16, {seqs, s.heads}, s.dt}},
      {"A", {core::DType::kF32, {s.heads}, s.a}},
      {"B", {core::DType::kBF16, {seqs, s.groups, s.dstate}, s.b}},
      {"C", {core::DType::kBF16, {seqs, s.groups, s.dstate}, s.c}},
      {"D", {core::DType::kF32, {s.heads}, s.d}},
      {"dt_bias", {core::DType::kF32, {s.heads}, s.dt_bias}},
      {"state_batch_indices", {core::DType::kI32, {seqs}, s.lines}},
      {"out",
       {core::DType::kBF16,
        {seqs, s.heads, s.headdim},
        std::vector<double>(static_cast<std::size_t>(seqs * s.heads * s.headdim), 0.0)}},
  };
}

std::map<std::string, std::int64_t> symbols_of(const Step& s) {
  return {{"num_seqs", static_cast<std::int64_t>(s.lines.size())},
          {"nheads", s.heads},
          {"headdim", s.headdim},
          {"dstate", s.dstate},
          {"ngroups", s.groups},
          {"num_cache_lines", s.cache_lines}};
}

oracle_test::Tensors step(const Step& s) {
  return oracle_test::call_oracle(kTask, symbols_of(s), tensors_of(s));
}

bool accepts(const Step& s) {
  auto tensors = tensors_of(s);
  return oracle_test::oracle_status(kTask, symbols_of(s), tensors).ok();
}

// One sequence on line 1 of 2, two heads of one channel, d_state 2, one group.
// Head 0: dt + dt_bias = 0, so dt' = log 2 and A = -1 gives a decay of exactly 1/2.
// Head 1: dt + dt_bias = 25, above the threshold, so dt' = 25; A = -0.04 gives exp(-1).
Step hand_step() {
  Step s{2,         1,           2,       1,      2,        {},         {3, 2},
         {0.5, 27}, {-1, -0.04}, {1, -1}, {1, 2}, {0.5, 1}, {-0.5, -2}, {1}};
  // line 0 (untouched): 9s; line 1: head 0 = (2, 4), head 1 = (1, 0).
  s.state = {9, 9, 9, 9, 2, 4, 1, 0};
  return s;
}

}  // namespace

TEST_CASE("selective_state_update oracle: hand-computed heads below and above the threshold") {
  const auto result = step(hand_step());
  const double ln2 = std::log(2.0), e1 = std::exp(-1.0);
  const auto& state = result.at("state").values;
  // Line 0 untouched.
  CHECK(std::vector<double>(state.begin(), state.begin() + 4) == std::vector<double>(4, 9.0));
  // Head 0: (2, 4) / 2 + log2 * (1, -1) * 3.
  CHECK(state[4] == doctest::Approx(1 + 3 * ln2).epsilon(1e-15));
  CHECK(state[5] == doctest::Approx(2 - 3 * ln2).epsilon(1e-15));
  // Head 1: (1, 0) * exp(-1) + 25 * (1, -1) * 2.
  CHECK(state[6] == doctest::Approx(e1 + 50).epsilon(1e-15));
  CHECK(state[7] == doctest::Approx(-50).epsilon(1e-15));
  // out = state . C + D x, C = (1, 2).
  const auto& out = result.at("out").values;
  CHECK(out[0] == doctest::Approx((1 + 3 * ln2) + 2 * (2 - 3 * ln2) + 0.5 * 3).epsilon(1e-14));
  CHECK(out[1] == doctest::Approx((e1 + 50) - 100 + 1 * 2).epsilon(1e-14));
}

TEST_CASE("selective_state_update oracle: heads read their own group's B and C") {
  // Four heads in two groups: heads 0, 1 read group 0, heads 2, 3 group 1. Group 1's B is zero,
  // so heads 2 and 3 only decay; group 0's C is zero, so heads 0 and 1 output only D x.
  Step s{4,
         1,
         1,
         2,
         1,
         {1, 1, 1, 1},
         {1, 1, 1, 1},
         {0, 0, 0, 0},
         {-1, -1, -1, -1},
         {1, 0},
         {0, 1},
         {2, 2, 2, 2},
         {0, 0, 0, 0},
         {0}};
  const auto result = step(s);
  const double ln2 = std::log(2.0), decay = std::exp(-ln2);
  const auto& state = result.at("state").values;
  CHECK(state[0] == doctest::Approx(decay + ln2).epsilon(1e-15));
  CHECK(state[1] == doctest::Approx(decay + ln2).epsilon(1e-15));
  CHECK(state[2] == doctest::Approx(decay).epsilon(1e-15));
  CHECK(state[3] == doctest::Approx(decay).epsilon(1e-15));
  const auto& out = result.at("out").values;
  CHECK(out[0] == 2.0);
  CHECK(out[1] == 2.0);
  CHECK(out[2] == doctest::Approx(decay + 2).epsilon(1e-15));
}

TEST_CASE("selective_state_update oracle: refuses ungrouped heads and shared or outside lines") {
  CHECK(accepts(hand_step()));
  Step ungrouped = hand_step();
  ungrouped.groups = 2;
  ungrouped.b = {1, -1, 1, -1};
  ungrouped.c = {1, 2, 1, 2};
  ungrouped.heads = 2;
  CHECK(accepts(ungrouped));  // 2 heads in 2 groups is fine...
  Step three = hand_step();
  three.heads = 3;
  three.groups = 2;
  three.x = {3, 2, 1};
  three.dt = {0.5, 27, 0};
  three.a = {-1, -0.04, -1};
  three.d = {0.5, 1, 1};
  three.dt_bias = {-0.5, -2, 0};
  three.b = {1, -1, 1, -1};
  three.c = {1, 2, 1, 2};
  three.state.assign(2 * 3 * 2, 1.0);
  CHECK_FALSE(accepts(three));  // ...3 heads in 2 groups is not
  Step outside = hand_step();
  outside.lines = {2};
  CHECK_FALSE(accepts(outside));
}

TEST_CASE("selective_state_update: every case draws lines inside its cache, heads fill groups") {
  const tasks::Task& task = oracle_test::repository_task(kTask);
  for (const auto& c : task.cases) {
    const auto& lines = c.values.at("state_batch_indices");
    CHECK_MESSAGE(lines.kind == tasks::GeneratorKind::kPermutation, c.name);
    CHECK_MESSAGE(lines.max <= c.symbols.at("num_cache_lines"), c.name);
    CHECK_MESSAGE(lines.max >= c.symbols.at("num_seqs"), c.name);
    CHECK_MESSAGE(c.symbols.at("nheads") % c.symbols.at("ngroups") == 0, c.name);
    CHECK_MESSAGE(c.symbols.at("dstate") % 4 == 0, c.name);
    CHECK_MESSAGE(c.symbols.at("dstate") <= 256, c.name);
  }
}

TEST_CASE("selective_state_update oracle: large dt stays finite and forgets the state") {
  // h_large_dt: dt' far above 20 for most heads, so exp(A dt') underflows; every output and state
  // entry stays finite.
  const tasks::Task& task = oracle_test::repository_task(kTask);
  const auto tensors = oracle_test::run_case(task, oracle_test::case_named(task, "h_large_dt"));
  for (const double v : tensors.at("out").values) REQUIRE(std::isfinite(v));
  for (const double v : tensors.at("state").values) REQUIRE(std::isfinite(v));
}
