// The llm/moe_sum oracle on hand-computed sums and on its task's cases.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "tasks/oracle.hpp"
#include "tasks/registry.hpp"
#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

namespace {

using oracle_test::Tensors;

Tensors run_moe_sum(std::int64_t tokens, std::int64_t k, std::int64_t hidden,
                    std::vector<double> input) {
  return oracle_test::call_oracle(
      "llm/moe_sum", {{"num_tokens", tokens}, {"topk", k}, {"hidden_size", hidden}},
      Tensors{
          {"input", {core::DType::kBF16, {tokens, k, hidden}, std::move(input)}},
          {"output",
           {core::DType::kBF16,
            {tokens, hidden},
            std::vector<double>(static_cast<std::size_t>(tokens * hidden))}},
      });
}

}  // namespace

TEST_CASE("moe_sum oracle: sums the slots of each token, column by column") {
  // Two tokens, three slots, two columns: token 0 slots (1, 2), (3, 4), (5, 6); token 1 slots
  // (0.5, -1), (0.25, 1), (-0.75, 0.125).
  const auto out = run_moe_sum(2, 3, 2, {1, 2, 3, 4, 5, 6, 0.5, -1, 0.25, 1, -0.75, 0.125});
  CHECK(out.at("output").values == std::vector<double>{9, 12, 0, 0.125});
}

TEST_CASE("moe_sum oracle: one slot is a copy; cancelling slots give exactly zero") {
  const auto copy = run_moe_sum(1, 1, 3, {1.5, -2.0, 1e-3});
  CHECK(copy.at("output").values == std::vector<double>{1.5, -2.0, 1e-3});
  const auto cancel = run_moe_sum(1, 2, 2, {3.0, -7.5, -3.0, 7.5});
  CHECK(cancel.at("output").values == std::vector<double>{0.0, 0.0});
}

TEST_CASE("moe_sum oracle: on a generated case each output is the sum of its slots") {
  const tasks::Task& task = oracle_test::repository_task("llm/moe_sum");
  for (const char* name : {"h_deepseek_v2_lite_top6", "h_hidden_1026"}) {
    CAPTURE(name);
    const tasks::Case& c = oracle_test::case_named(task, name);
    const Tensors tensors = oracle_test::run_case(task, c);
    const std::int64_t tokens = c.symbols.at("num_tokens");
    const std::int64_t k = c.symbols.at("topk");
    const std::int64_t hidden = c.symbols.at("hidden_size");
    const auto& in = tensors.at("input").values;
    const auto& out = tensors.at("output").values;
    std::size_t bad = 0;
    for (std::int64_t t = 0; t < tokens; ++t) {
      for (std::int64_t i = 0; i < hidden; i += 97) {
        double sum = 0.0;
        for (std::int64_t j = k - 1; j >= 0; --j) sum += in[(t * k + j) * hidden + i];
        bad += std::abs(sum - out[t * hidden + i]) <= 1e-12 ? 0 : 1;
      }
    }
    CHECK(bad == 0);
  }
}
