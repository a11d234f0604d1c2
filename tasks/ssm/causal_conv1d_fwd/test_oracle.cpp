// The ssm/causal_conv1d_fwd oracle on hand-computed sequences, a prompt split into chunks that
// continue from the conv state, and the malformed batches it refuses.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

namespace {

const std::string kTask = "ssm/causal_conv1d_fwd";

struct Batch {
  std::int64_t dim, cache_lines;
  std::vector<double> x, weight, bias, states, bounds, lines, initial;
};

oracle_test::Tensors tensors_of(const Batch& batch) {
  const auto tokens = static_cast<std::int64_t>(batch.x.size()) / batch.dim;
  const auto seqs = static_cast<std::int64_t>(batch.lines.size());
  return {
      {"out",
       {core::DType::kBF16,
        {tokens, batch.dim},
        std::vector<double>(static_cast<std::size_t>(tokens * batch.dim), 0.0)}},
      {"x", {core::DType::kBF16, {tokens, batch.dim}, batch.x}},
      {"weight", {core::DType::kBF16, {batch.dim, 4}, batch.weight}},
      {"bias", {core::DType::kBF16, {batch.dim}, batch.bias}},
      {"conv_states", {core::DType::kBF16, {batch.cache_lines, 3, batch.dim}, batch.states}},
      {"query_start_loc", {core::DType::kI32, {seqs + 1}, batch.bounds}},
      {"cache_indices", {core::DType::kI32, {seqs}, batch.lines}},
      {"has_initial_state", {core::DType::kBool, {seqs}, batch.initial}},
  };
}

std::map<std::string, std::int64_t> symbols_of(const Batch& batch) {
  const auto seqs = static_cast<std::int64_t>(batch.lines.size());
  return {{"num_tokens", static_cast<std::int64_t>(batch.x.size()) / batch.dim},
          {"dim", batch.dim},
          {"num_seqs", seqs},
          {"num_seq_bounds", seqs + 1},
          {"num_cache_lines", batch.cache_lines}};
}

oracle_test::Tensors convolve(const Batch& batch, bool silu) {
  return oracle_test::call_oracle(kTask, symbols_of(batch), tensors_of(batch),
                                  {{"silu_activation", silu ? 1.0 : 0.0}});
}

bool accepts(const Batch& batch) {
  auto tensors = tensors_of(batch);
  return oracle_test::oracle_status(kTask, symbols_of(batch), tensors, {{"silu_activation", 1.0}})
      .ok();
}

// One channel, two sequences: sequence 0 (2 tokens, x = 4, 5) continues from cache line 1
// (inputs 1, 2, 3); sequence 1 (1 token, x = 6) starts fresh although line 0 holds 7, 8, 9;
// line 2 belongs to no sequence. Taps 0.5, -1, 0.25, 2 (tap 3 on the current token), bias 0.5.
Batch hand_batch() {
  return Batch{
      1,         3,      {4, 5, 6}, {0.5, -1, 0.25, 2}, {0.5}, {7, 8, 9, 1, 2, 3, 10, 11, 12},
      {0, 2, 3}, {1, 0}, {1, 0}};
}

double silu(double y) { return y / (1.0 + std::exp(-y)); }

}  // namespace

TEST_CASE("causal_conv1d_fwd oracle: hand-computed outputs and final states") {
  const auto result = convolve(hand_batch(), false);
  // Token 0: 0.5 + 0.5*1 - 1*2 + 0.25*3 + 2*4; token 1: 0.5 + 0.5*2 - 1*3 + 0.25*4 + 2*5;
  // token 2: only the current input, 0.5 + 2*6.
  CHECK(result.at("out").values == std::vector<double>{7.75, 9.5, 12.5});
  // Line 1 holds sequence 0's last three inputs (3 of them from its initial state and x), line
  // 0 the fresh sequence's zeros and its one input, line 2 is untouched.
  CHECK(result.at("conv_states").values == std::vector<double>{0, 0, 6, 3, 4, 5, 10, 11, 12});
}

TEST_CASE("causal_conv1d_fwd oracle: silu_activation applies SiLU to every output") {
  const auto result = convolve(hand_batch(), true);
  const auto& out = result.at("out").values;
  CHECK(out[0] == doctest::Approx(silu(7.75)).epsilon(1e-15));
  CHECK(out[1] == doctest::Approx(silu(9.5)).epsilon(1e-15));
  CHECK(out[2] == doctest::Approx(silu(12.5)).epsilon(1e-15));
}

TEST_CASE("causal_conv1d_fwd oracle: a prompt run in two chunks equals the prompt in one") {
  // Three channels, ten tokens: once as one sequence from zeros, and as chunks of 4 and 6
  // tokens, the second continuing from the state the first left (chunked prefill).
  std::vector<double> x(30), weight(12), bias{0.1, -0.2, 0.3};
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(1.3 * static_cast<double>(i));
  for (std::size_t i = 0; i < weight.size(); ++i)
    weight[i] = std::cos(0.7 * static_cast<double>(i));
  const std::vector<double> garbage(9, 5.0);
  const auto whole = convolve(Batch{3, 1, x, weight, bias, garbage, {0, 10}, {0}, {0}}, true);
  const std::vector<double> head(x.begin(), x.begin() + 12), tail(x.begin() + 12, x.end());
  const auto first = convolve(Batch{3, 1, head, weight, bias, garbage, {0, 4}, {0}, {0}}, true);
  const auto second = convolve(
      Batch{3, 1, tail, weight, bias, first.at("conv_states").values, {0, 6}, {0}, {1}}, true);
  std::vector<double> chunked = first.at("out").values;
  chunked.insert(chunked.end(), second.at("out").values.begin(), second.at("out").values.end());
  REQUIRE(chunked.size() == whole.at("out").values.size());
  for (std::size_t i = 0; i < chunked.size(); ++i) {
    CHECK(chunked[i] == doctest::Approx(whole.at("out").values[i]).epsilon(1e-14));
  }
  CHECK(second.at("conv_states").values == whole.at("conv_states").values);
}

TEST_CASE("causal_conv1d_fwd oracle: refuses empty sequences, bad bounds and shared lines") {
  CHECK(accepts(hand_batch()));
  Batch empty = hand_batch();
  empty.bounds = {0, 3, 3};
  CHECK_FALSE(accepts(empty));
  Batch short_bounds = hand_batch();
  short_bounds.bounds = {0, 2, 2};
  CHECK_FALSE(accepts(short_bounds));
  Batch shared = hand_batch();
  shared.lines = {1, 1};
  CHECK_FALSE(accepts(shared));
  Batch outside = hand_batch();
  outside.lines = {1, 3};
  CHECK_FALSE(accepts(outside));
}

TEST_CASE("causal_conv1d_fwd: every case packs its sequences and names lines of its cache") {
  // The lists in task.toml are written by hand: each must start at 0, rise, and end at the
  // case's num_tokens, with one entry more than num_seqs; cache lines are drawn below
  // num_cache_lines. (The oracle refuses anything else, but it is too slow for every case.)
  const tasks::Task& task = oracle_test::repository_task(kTask);
  for (const auto& c : task.cases) {
    const auto& spec = c.values.at("query_start_loc");
    REQUIRE_MESSAGE(spec.kind == tasks::GeneratorKind::kList, c.name);
    const auto& bounds = spec.list;
    CHECK_MESSAGE(bounds.size() == static_cast<std::size_t>(c.symbols.at("num_seqs") + 1), c.name);
    CHECK_MESSAGE(bounds.front() == 0.0, c.name);
    CHECK_MESSAGE(bounds.back() == static_cast<double>(c.symbols.at("num_tokens")), c.name);
    for (std::size_t i = 1; i < bounds.size(); ++i)
      CHECK_MESSAGE(bounds[i] > bounds[i - 1], c.name);
    const auto& lines = c.values.at("cache_indices");
    CHECK_MESSAGE(lines.kind == tasks::GeneratorKind::kPermutation, c.name);
    CHECK_MESSAGE(lines.max <= c.symbols.at("num_cache_lines"), c.name);
  }
}

TEST_CASE("causal_conv1d_fwd oracle: runs on the smallest hidden cases as the runner builds them") {
  const tasks::Task& task = oracle_test::repository_task(kTask);
  for (const char* name : {"h_short_sequences", "h_tile_straddle"}) {
    const auto tensors = oracle_test::run_case(task, oracle_test::case_named(task, name));
    double total = 0.0;
    for (const double v : tensors.at("out").values) total += std::abs(v);
    CHECK_MESSAGE(total > 0.0, name);
  }
}
