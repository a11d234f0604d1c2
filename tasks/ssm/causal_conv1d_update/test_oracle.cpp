// The ssm/causal_conv1d_update oracle on hand-computed steps, padding entries, agreement with
// ssm/causal_conv1d_fwd over the same tokens, and the indices it refuses.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

namespace {

const std::string kTask = "ssm/causal_conv1d_update";

struct Step {
  std::int64_t dim, cache_lines;
  std::vector<double> x, weight, bias, states, lines;
};

oracle_test::Tensors tensors_of(const Step& step) {
  const auto seqs = static_cast<std::int64_t>(step.lines.size());
  return {
      {"out",
       {core::DType::kBF16,
        {seqs, step.dim},
        std::vector<double>(static_cast<std::size_t>(seqs * step.dim), 0.0)}},
      {"x", {core::DType::kBF16, {seqs, step.dim}, step.x}},
      {"weight", {core::DType::kBF16, {step.dim, 4}, step.weight}},
      {"bias", {core::DType::kBF16, {step.dim}, step.bias}},
      {"conv_states", {core::DType::kBF16, {step.cache_lines, 3, step.dim}, step.states}},
      {"conv_state_indices", {core::DType::kI32, {seqs}, step.lines}},
  };
}

std::map<std::string, std::int64_t> symbols_of(const Step& step) {
  return {{"num_seqs", static_cast<std::int64_t>(step.lines.size())},
          {"dim", step.dim},
          {"num_cache_lines", step.cache_lines}};
}

oracle_test::Tensors update(const Step& step, bool silu) {
  return oracle_test::call_oracle(kTask, symbols_of(step), tensors_of(step),
                                  {{"silu_activation", silu ? 1.0 : 0.0}});
}

bool accepts(const Step& step) {
  auto tensors = tensors_of(step);
  return oracle_test::oracle_status(kTask, symbols_of(step), tensors, {{"silu_activation", 1.0}})
      .ok();
}

// One channel, three entries: sequence 0 on line 2 (inputs 1, 2, 3 before, new token 4), a
// padding entry (x = 9), sequence 2 on line 0 (inputs 5, 6, 7, new token -1); line 1 unused.
// Taps 0.5, -1, 0.25, 2, bias 0.5.
Step hand_step() {
  return Step{1,         3, {4, 9, -1}, {0.5, -1, 0.25, 2}, {0.5}, {5, 6, 7, 10, 11, 12, 1, 2, 3},
              {2, -1, 0}};
}

}  // namespace

TEST_CASE("causal_conv1d_update oracle: hand-computed step, padding copied, states shifted") {
  const auto result = update(hand_step(), false);
  // Sequence 0: 0.5 + 0.5*1 - 1*2 + 0.25*3 + 2*4 = 7.75; padding: x itself; sequence 2:
  // 0.5 + 0.5*5 - 1*6 + 0.25*7 + 2*(-1) = -3.25.
  CHECK(result.at("out").values == std::vector<double>{7.75, 9, -3.25});
  CHECK(result.at("conv_states").values == std::vector<double>{6, 7, -1, 10, 11, 12, 2, 3, 4});
}

TEST_CASE("causal_conv1d_update oracle: SiLU on real entries, never on padding") {
  const auto result = update(hand_step(), true);
  const auto& out = result.at("out").values;
  CHECK(out[0] == doctest::Approx(7.75 / (1.0 + std::exp(-7.75))).epsilon(1e-15));
  CHECK(out[1] == 9.0);
  CHECK(out[2] == doctest::Approx(-3.25 / (1.0 + std::exp(3.25))).epsilon(1e-15));
}

TEST_CASE("causal_conv1d_update oracle: decode steps continue what causal_conv1d_fwd computes") {
  // Two channels: a 5-token prompt through the prefill oracle, then 3 decode steps, against
  // the 8 tokens in one prefill call: same outputs, same final state.
  const std::int64_t dim = 2;
  std::vector<double> x(16), weight(8), bias{0.25, -0.125};
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.9 * static_cast<double>(i) + 0.3);
  for (std::size_t i = 0; i < weight.size(); ++i)
    weight[i] = std::cos(1.7 * static_cast<double>(i));
  auto prefill = [&](std::vector<double> tokens, std::int64_t count) {
    oracle_test::Tensors tensors{
        {"out",
         {core::DType::kBF16,
          {count, dim},
          std::vector<double>(static_cast<std::size_t>(count * dim), 0.0)}},
        {"x", {core::DType::kBF16, {count, dim}, std::move(tokens)}},
        {"weight", {core::DType::kBF16, {dim, 4}, weight}},
        {"bias", {core::DType::kBF16, {dim}, bias}},
        {"conv_states", {core::DType::kBF16, {1, 3, dim}, std::vector<double>(6, 0.0)}},
        {"query_start_loc", {core::DType::kI32, {2}, {0, static_cast<double>(count)}}},
        {"cache_indices", {core::DType::kI32, {1}, {0}}},
        {"has_initial_state", {core::DType::kBool, {1}, {0}}},
    };
    return oracle_test::call_oracle("ssm/causal_conv1d_fwd",
                                    {{"num_tokens", count},
                                     {"dim", dim},
                                     {"num_seqs", 1},
                                     {"num_seq_bounds", 2},
                                     {"num_cache_lines", 1}},
                                    std::move(tensors), {{"silu_activation", 1.0}});
  };
  const auto whole = prefill(x, 8);
  const auto prompt = prefill(std::vector<double>(x.begin(), x.begin() + 10), 5);
  std::vector<double> state = prompt.at("conv_states").values;
  for (std::int64_t step = 5; step < 8; ++step) {
    const std::vector<double> token(x.begin() + step * dim, x.begin() + (step + 1) * dim);
    const auto result = update(Step{dim, 1, token, weight, bias, state, {0}}, true);
    for (std::int64_t d = 0; d < dim; ++d) {
      CHECK(result.at("out").values[static_cast<std::size_t>(d)] ==
            doctest::Approx(whole.at("out").values[static_cast<std::size_t>(step * dim + d)])
                .epsilon(1e-14));
    }
    state = result.at("conv_states").values;
  }
  CHECK(state == whole.at("conv_states").values);
}

TEST_CASE("causal_conv1d_update oracle: refuses lines outside the cache and shared lines") {
  CHECK(accepts(hand_step()));
  Step outside = hand_step();
  outside.lines = {2, -1, 3};
  CHECK_FALSE(accepts(outside));
  Step negative = hand_step();
  negative.lines = {2, -2, 0};
  CHECK_FALSE(accepts(negative));
  Step shared = hand_step();
  shared.lines = {0, -1, 0};
  CHECK_FALSE(accepts(shared));
}

TEST_CASE("causal_conv1d_update: every case draws lines inside its cache") {
  const tasks::Task& task = oracle_test::repository_task(kTask);
  for (const auto& c : task.cases) {
    const auto& lines = c.values.at("conv_state_indices");
    CHECK_MESSAGE(lines.kind == tasks::GeneratorKind::kPermutation, c.name);
    CHECK_MESSAGE(lines.max <= c.symbols.at("num_cache_lines"), c.name);
    CHECK_MESSAGE(lines.max >= c.symbols.at("num_seqs"), c.name);
  }
}

TEST_CASE("causal_conv1d_update oracle: the padded hidden case copies x into padded rows") {
  const tasks::Task& task = oracle_test::repository_task(kTask);
  const auto tensors = oracle_test::run_case(task, oracle_test::case_named(task, "h_half_padding"));
  const auto& lines = tensors.at("conv_state_indices").values;
  const std::int64_t dim = 4096;
  std::size_t padded = 0;
  for (std::size_t b = 0; b < lines.size(); ++b) {
    if (lines[b] != -1) continue;
    ++padded;
    for (std::int64_t d = 0; d < dim; ++d) {
      const auto i = b * static_cast<std::size_t>(dim) + static_cast<std::size_t>(d);
      REQUIRE(tensors.at("out").values[i] == tensors.at("x").values[i]);
    }
  }
  CHECK(padded >= 5);
  CHECK(padded <= 35);
}
