// Oracle of llm/topk_softmax: float64 softmax per token, the k largest probabilities in
// descending order (exact ties: the lower expert index first), token_expert_indices j * T + t.
#include "tasks/oracle.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace crucible::tasks {
namespace {

core::Status topk_softmax(const OracleCall& call) {
  const OracleTensor& gating = call.tensor("gating_output");
  OracleTensor& weights = call.tensor("topk_weights");
  OracleTensor& indices = call.tensor("topk_indices");
  OracleTensor& token_expert = call.tensor("token_expert_indices");
  const std::int64_t tokens = call.symbol("num_tokens");
  const std::int64_t experts = call.symbol("num_experts");
  const std::int64_t k = call.symbol("topk");
  if (k < 1 || k > experts) {
    return core::Error{core::ErrorCode::kInvalidArgument,
                       "topk_softmax: topk must lie in [1, num_experts]"};
  }
  std::vector<double> p(static_cast<std::size_t>(experts));
  std::vector<std::int64_t> order(static_cast<std::size_t>(experts));
  for (std::int64_t t = 0; t < tokens; ++t) {
    const double* row = gating.values.data() + t * experts;
    const double row_max = *std::max_element(row, row + experts);
    double sum = 0.0;
    for (std::int64_t e = 0; e < experts; ++e) {
      p[e] = std::exp(row[e] - row_max);
      sum += p[e];
    }
    for (double& value : p) value /= sum;
    std::iota(order.begin(), order.end(), std::int64_t{0});
    // Stable: equal probabilities keep ascending expert order.
    std::stable_sort(order.begin(), order.end(),
                     [&](std::int64_t a, std::int64_t b) { return p[a] > p[b]; });
    for (std::int64_t j = 0; j < k; ++j) {
      const std::int64_t out = t * k + j;
      weights.values[out] = p[order[j]];
      indices.values[out] = static_cast<double>(order[j]);
      token_expert.values[out] = static_cast<double>(j * tokens + t);
    }
  }
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("llm/topk_softmax", topk_softmax);

}  // namespace crucible::tasks
