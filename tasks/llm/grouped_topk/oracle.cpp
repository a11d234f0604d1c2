// Oracle of llm/grouped_topk: DeepSeek-V3 routing in float64 (sigmoid scores, bias-corrected
// choice, top-2-sum group scores, top groups, top experts, renormalised and scaled weights).
// Exact ties go to the lower group and expert index; experts come out in descending choice.
#include "tasks/oracle.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <vector>

namespace crucible::tasks {
namespace {

core::Status grouped_topk(const OracleCall& call) {
  const OracleTensor& gating = call.tensor("gating_output");
  const OracleTensor& bias = call.tensor("e_score_correction_bias");
  OracleTensor& weights = call.tensor("topk_weights");
  OracleTensor& ids = call.tensor("topk_ids");
  const std::int64_t tokens = call.symbol("num_tokens");
  const std::int64_t experts = call.symbol("num_experts");
  const std::int64_t k = call.symbol("topk");
  const auto groups = static_cast<std::int64_t>(call.scalar("num_expert_group"));
  const auto kept_groups = static_cast<std::int64_t>(call.scalar("topk_group"));
  const bool renormalize = call.scalar("renormalize") != 0.0;
  const double scaling = call.scalar("routed_scaling_factor");
  if (groups < 1 || experts % groups != 0 || experts / groups < 2 || kept_groups < 1 ||
      kept_groups > groups || k < 1 || k > kept_groups * (experts / groups)) {
    return core::Error{core::ErrorCode::kInvalidArgument,
                       "grouped_topk: num_experts must split into num_expert_group groups of at "
                       "least 2, with 1 <= topk_group <= num_expert_group and "
                       "1 <= topk <= topk_group * group size"};
  }
  const std::int64_t group_size = experts / groups;

  std::vector<double> score(static_cast<std::size_t>(experts));
  std::vector<double> choice(static_cast<std::size_t>(experts));
  std::vector<double> group_score(static_cast<std::size_t>(groups));
  std::vector<std::int64_t> group_order(static_cast<std::size_t>(groups));
  std::vector<char> kept(static_cast<std::size_t>(groups));
  std::vector<std::int64_t> candidates;
  for (std::int64_t t = 0; t < tokens; ++t) {
    const double* row = gating.values.data() + t * experts;
    for (std::int64_t e = 0; e < experts; ++e) {
      score[e] = 1.0 / (1.0 + std::exp(-row[e]));
      choice[e] = score[e] + bias.values[e];
    }
    for (std::int64_t q = 0; q < groups; ++q) {
      // The two largest choice scores of the group (a repeated value counts twice).
      std::vector<double> members(choice.begin() + q * group_size,
                                  choice.begin() + (q + 1) * group_size);
      std::partial_sort(members.begin(), members.begin() + 2, members.end(),
                        std::greater<double>());
      group_score[q] = members[0] + members[1];
    }
    std::iota(group_order.begin(), group_order.end(), std::int64_t{0});
    std::stable_sort(group_order.begin(), group_order.end(), [&](std::int64_t a, std::int64_t b) {
      return group_score[a] > group_score[b];
    });
    std::fill(kept.begin(), kept.end(), 0);
    for (std::int64_t i = 0; i < kept_groups; ++i) kept[group_order[i]] = 1;

    candidates.clear();
    for (std::int64_t e = 0; e < experts; ++e) {
      if (kept[e / group_size]) candidates.push_back(e);
    }
    std::stable_sort(candidates.begin(), candidates.end(),
                     [&](std::int64_t a, std::int64_t b) { return choice[a] > choice[b]; });
    double sum = 0.0;
    for (std::int64_t j = 0; j < k; ++j) sum += score[candidates[j]];
    for (std::int64_t j = 0; j < k; ++j) {
      const std::int64_t e = candidates[j];
      const double weight = renormalize ? score[e] / sum : score[e];
      weights.values[t * k + j] = weight * scaling;
      ids.values[t * k + j] = static_cast<double>(e);
    }
  }
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("llm/grouped_topk", grouped_topk);

}  // namespace crucible::tasks
