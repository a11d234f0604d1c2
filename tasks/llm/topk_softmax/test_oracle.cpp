// The llm/topk_softmax oracle on hand-computed rows and on its own task's values.
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

// Runs the oracle on `tokens` rows of `experts` logits, top-`k`.
Tensors run_topk_softmax(std::int64_t tokens, std::int64_t experts, std::int64_t k,
                         std::vector<double> gating) {
  const auto outputs = static_cast<std::size_t>(tokens * k);
  return oracle_test::call_oracle(
      "llm/topk_softmax", {{"num_tokens", tokens}, {"num_experts", experts}, {"topk", k}},
      Tensors{
          {"gating_output", {core::DType::kF32, {tokens, experts}, std::move(gating)}},
          {"topk_weights", {core::DType::kF32, {tokens, k}, std::vector<double>(outputs)}},
          {"topk_indices", {core::DType::kI32, {tokens, k}, std::vector<double>(outputs)}},
          {"token_expert_indices", {core::DType::kI32, {tokens, k}, std::vector<double>(outputs)}},
      });
}

}  // namespace

TEST_CASE("topk_softmax oracle: four experts with known logits, top-2 in descending order") {
  // Logits (0, ln 2, ln 3, ln 4): probabilities 1/10, 2/10, 3/10, 4/10.
  const auto out = run_topk_softmax(1, 4, 2, {0.0, std::log(2.0), std::log(3.0), std::log(4.0)});
  CHECK(out.at("topk_indices").values == std::vector<double>{3.0, 2.0});
  CHECK(out.at("topk_weights").values[0] == doctest::Approx(0.4).epsilon(1e-15));
  CHECK(out.at("topk_weights").values[1] == doctest::Approx(0.3).epsilon(1e-15));
  CHECK(out.at("token_expert_indices").values == std::vector<double>{0.0, 1.0});
}

TEST_CASE(
    "topk_softmax oracle: exact ties go to the lower index; token_expert_indices is k-major") {
  // Row 0: experts 1 and 2 tie on top. Row 1: all four tie. Row 2: experts 0 and 3 tie second.
  const auto out = run_topk_softmax(3, 4, 2,
                                    {0.0, 5.0, 5.0, 1.0,  //
                                     7.0, 7.0, 7.0, 7.0,  //
                                     2.0, 9.0, 1.0, 2.0});
  CHECK(out.at("topk_indices").values == std::vector<double>{1.0, 2.0, 0.0, 1.0, 1.0, 0.0});
  CHECK(out.at("topk_weights").values[2] == doctest::Approx(0.25).epsilon(1e-15));
  CHECK(out.at("topk_weights").values[3] == doctest::Approx(0.25).epsilon(1e-15));
  // Slot j of token t is j * num_tokens + t.
  CHECK(out.at("token_expert_indices").values == std::vector<double>{0.0, 3.0, 1.0, 4.0, 2.0, 5.0});
}

TEST_CASE(
    "topk_softmax oracle: a large logit range stays finite; probabilities that underflow even "
    "float64 tie at zero and go by index") {
  // exp(-1000) and exp(-2000) are both 0 in float64, so experts 1 and 2 tie.
  const auto out = run_topk_softmax(1, 4, 4, {1000.0, -2000.0, -1000.0, 999.0});
  const auto& w = out.at("topk_weights").values;
  CHECK(out.at("topk_indices").values == std::vector<double>{0.0, 3.0, 1.0, 2.0});
  CHECK(w[0] + w[1] + w[2] + w[3] == doctest::Approx(1.0).epsilon(1e-15));
  CHECK(w[0] == doctest::Approx(1.0 / (1.0 + std::exp(-1.0))).epsilon(1e-14));
  CHECK(w[2] == 0.0);
  CHECK(w[3] == 0.0);
}

TEST_CASE("topk_softmax oracle: on generated cases ids are distinct, weights descending") {
  const tasks::Task* task = &oracle_test::repository_task("llm/topk_softmax");
  for (const char* name : {"h_qwen3_tokens_333", "h_qwen15_moe_60_experts", "mixtral_decode_32"}) {
    CAPTURE(name);
    const tasks::Case* chosen = &case_named(*task, name);
    const Tensors tensors = oracle_test::run_case(*task, *chosen);
    const std::int64_t tokens = chosen->symbols.at("num_tokens");
    const std::int64_t experts = chosen->symbols.at("num_experts");
    const std::int64_t k = chosen->symbols.at("topk");
    const auto& gating = tensors.at("gating_output").values;
    const auto& w = tensors.at("topk_weights").values;
    const auto& ids = tensors.at("topk_indices").values;
    std::size_t bad = 0;
    for (std::int64_t t = 0; t < tokens; ++t) {
      std::set<double> seen;
      double left_out_max = 0.0;
      const double* row = gating.data() + t * experts;
      double row_max = row[0];
      for (std::int64_t e = 1; e < experts; ++e) row_max = std::max(row_max, row[e]);
      double sum = 0.0;
      for (std::int64_t e = 0; e < experts; ++e) sum += std::exp(row[e] - row_max);
      for (std::int64_t j = 0; j < k; ++j) {
        const double id = ids[t * k + j];
        bad += (id >= 0 && id < experts && seen.insert(id).second) ? 0 : 1;
        if (j > 0) bad += w[t * k + j] <= w[t * k + j - 1] ? 0 : 1;
        const double p = std::exp(row[static_cast<std::int64_t>(id)] - row_max) / sum;
        bad += std::abs(p - w[t * k + j]) <= 1e-15 ? 0 : 1;
      }
      for (std::int64_t e = 0; e < experts; ++e) {
        if (seen.count(static_cast<double>(e)) == 0) {
          left_out_max = std::max(left_out_max, std::exp(row[e] - row_max) / sum);
        }
      }
      bad += left_out_max <= w[t * k + k - 1] ? 0 : 1;
    }
    CHECK(bad == 0);
  }
}
