// The llm/grouped_topk oracle on a hand-made grouping and on its own task's values.
#include <doctest/doctest.h>

#include <cmath>
#include <set>

#include "tasks/oracle.hpp"
#include "tasks/registry.hpp"
#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

namespace {

using oracle_test::case_named;
using oracle_test::Tensors;

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// Runs the oracle on one or more rows; `scalars` override the task's defaults.
Tensors run_grouped(std::int64_t tokens, std::int64_t experts, std::int64_t k,
                    std::vector<double> gating, std::vector<double> bias,
                    const std::map<std::string, double>& scalars) {
  const auto outputs = static_cast<std::size_t>(tokens * k);
  return oracle_test::call_oracle(
      "llm/grouped_topk", {{"num_tokens", tokens}, {"num_experts", experts}, {"topk", k}},
      Tensors{
          {"gating_output", {core::DType::kF32, {tokens, experts}, std::move(gating)}},
          {"e_score_correction_bias", {core::DType::kF32, {experts}, std::move(bias)}},
          {"topk_weights", {core::DType::kF32, {tokens, k}, std::vector<double>(outputs)}},
          {"topk_ids", {core::DType::kI32, {tokens, k}, std::vector<double>(outputs)}},
      },
      scalars);
}

}  // namespace

TEST_CASE("grouped_topk oracle: the group with the best top-2 sum wins over the best expert") {
  // 8 experts in 2 groups of 4, keep 1 group, top-2. Logits 0 (sigmoid 0.5 everywhere), so the
  // bias ranks: group 0 top-2 sum 0.8 + 0.7 = 1.5, group 1 (which holds the best expert,
  // 0.9) only 0.9 + 0.5 = 1.4. Weights: 0.5 each, renormalised to 0.5, times 2.5.
  const auto out = run_grouped(1, 8, 2, std::vector<double>(8, 0.0),
                               {0.3, 0.2, -0.1, -0.2, 0.4, 0.0, -0.3, -0.4},
                               {{"num_expert_group", 2}, {"topk_group", 1}});
  CHECK(out.at("topk_ids").values == std::vector<double>{0.0, 1.0});
  CHECK(out.at("topk_weights").values[0] == doctest::Approx(1.25).epsilon(1e-15));
  CHECK(out.at("topk_weights").values[1] == doctest::Approx(1.25).epsilon(1e-15));
}

TEST_CASE("grouped_topk oracle: weights are the original sigmoid scores, not the biased ones") {
  // Expert 1's bias lifts it above expert 0 for the choice; the weights use sigmoid(logit).
  const auto out = run_grouped(1, 4, 2, {2.0, -1.0, 0.0, -3.0}, {0.0, 2.0, 0.0, 0.0},
                               {{"num_expert_group", 1}, {"topk_group", 1}});
  CHECK(out.at("topk_ids").values == std::vector<double>{1.0, 0.0});
  const double s0 = sigmoid(2.0), s1 = sigmoid(-1.0);
  CHECK(out.at("topk_weights").values[0] == doctest::Approx(s1 / (s0 + s1) * 2.5).epsilon(1e-14));
  CHECK(out.at("topk_weights").values[1] == doctest::Approx(s0 / (s0 + s1) * 2.5).epsilon(1e-14));
  // Without renormalisation: the raw scores times the scaling factor.
  const auto raw = run_grouped(1, 4, 2, {2.0, -1.0, 0.0, -3.0}, {0.0, 2.0, 0.0, 0.0},
                               {{"num_expert_group", 1},
                                {"topk_group", 1},
                                {"renormalize", 0},
                                {"routed_scaling_factor", 1.0}});
  CHECK(raw.at("topk_weights").values[0] == doctest::Approx(s1).epsilon(1e-14));
  CHECK(raw.at("topk_weights").values[1] == doctest::Approx(s0).epsilon(1e-14));
}

TEST_CASE("grouped_topk oracle: a repeated top value counts twice in its group's score") {
  // Group 0: choice scores 0.6, 0.6, 0.0 ... sum 1.2; group 1: 1.0, 0.1 sum 1.1. The group of
  // the single best expert loses.
  const auto out = run_grouped(1, 8, 1, std::vector<double>(8, 0.0),
                               {0.1, 0.1, -0.5, -0.5, 0.5, -0.4, -0.5, -0.5},
                               {{"num_expert_group", 2}, {"topk_group", 1}});
  CHECK(out.at("topk_ids").values == std::vector<double>{0.0});
}

TEST_CASE("grouped_topk oracle: on generated DeepSeek-V3 rows weights sum to the scaling factor") {
  const tasks::Task* task = &oracle_test::repository_task("llm/grouped_topk");
  for (const char* name : {"h_tokens_333", "h_glm45_160_experts", "decode_32"}) {
    CAPTURE(name);
    const tasks::Case* chosen = &case_named(*task, name);
    const Tensors tensors = oracle_test::run_case(*task, *chosen);
    const std::int64_t tokens = chosen->symbols.at("num_tokens");
    const std::int64_t experts = chosen->symbols.at("num_experts");
    const std::int64_t k = chosen->symbols.at("topk");
    const auto groups = static_cast<std::int64_t>(chosen->scalars.at("num_expert_group"));
    const auto kept = static_cast<std::int64_t>(chosen->scalars.at("topk_group"));
    const double scaling = chosen->scalars.at("routed_scaling_factor");
    const auto& w = tensors.at("topk_weights").values;
    const auto& ids = tensors.at("topk_ids").values;
    std::size_t bad = 0;
    for (std::int64_t t = 0; t < tokens; ++t) {
      std::set<double> seen;
      std::set<std::int64_t> used_groups;
      double sum = 0.0;
      for (std::int64_t j = 0; j < k; ++j) {
        const double id = ids[t * k + j];
        bad += (id >= 0 && id < experts && seen.insert(id).second) ? 0 : 1;
        used_groups.insert(static_cast<std::int64_t>(id) / (experts / groups));
        sum += w[t * k + j];
        bad += w[t * k + j] > 0.0 ? 0 : 1;
      }
      bad += std::abs(sum - scaling) <= 1e-12 ? 0 : 1;
      bad += static_cast<std::int64_t>(used_groups.size()) <= kept ? 0 : 1;
    }
    CHECK(bad == 0);
  }
}
