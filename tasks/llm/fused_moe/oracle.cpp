// Oracle of llm/fused_moe: every token's routing-weighted sum over its topk experts of
// w2[e] @ (silu(w1[e, 0:I] @ x) * (w1[e, I:2I] @ x)), all in double. Tokens are shared out among
// threads for prefill-sized cases, and each token touches only the experts it is routed to.
#include "tasks/oracle.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace crucible::tasks {
namespace {

double dot(const double* a, const double* b, std::int64_t n) {
  double sum = 0.0;
  for (std::int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

core::Status fused_moe(const OracleCall& call) {
  const OracleTensor& hidden_states = call.tensor("hidden_states");
  const OracleTensor& w1 = call.tensor("w1");
  const OracleTensor& w2 = call.tensor("w2");
  const OracleTensor& topk_weights = call.tensor("topk_weights");
  const OracleTensor& topk_ids = call.tensor("topk_ids");
  OracleTensor& out = call.tensor("out");
  const std::int64_t tokens = call.symbol("num_tokens");
  const std::int64_t hidden = call.symbol("hidden_size");
  const std::int64_t inter = call.symbol("intermediate_size");
  const std::int64_t experts = call.symbol("num_experts");
  const std::int64_t k = call.symbol("topk");
  if (call.symbol("gate_up_size") != 2 * inter) {
    return core::Error{core::ErrorCode::kInvalidArgument,
                       "fused_moe: gate_up_size must be 2 * intermediate_size"};
  }
  const auto count = [](std::int64_t a, std::int64_t b, std::int64_t c = 1) {
    return static_cast<std::size_t>(a * b * c);
  };
  if (hidden_states.size() != count(tokens, hidden) || out.size() != count(tokens, hidden) ||
      w1.size() != count(experts, 2 * inter, hidden) ||
      w2.size() != count(experts, hidden, inter) || topk_weights.size() != count(tokens, k) ||
      topk_ids.size() != count(tokens, k)) {
    return core::Error{core::ErrorCode::kInvalidArgument,
                       "fused_moe: a tensor's size does not match the case's symbols"};
  }
  // Ids are checked before any is used as an index into the weights.
  for (std::size_t i = 0; i < topk_ids.size(); ++i) {
    const double id = topk_ids.values[i];
    if (!(id >= 0.0 && id < static_cast<double>(experts))) {
      return core::Error{core::ErrorCode::kInvalidArgument,
                         "fused_moe: topk_ids[" + std::to_string(i) +
                             "] = " + std::to_string(static_cast<std::int64_t>(id)) +
                             " is not an expert in [0, " + std::to_string(experts) + ")"};
    }
  }

  // One token: a (the activation of one slot) and sum (its output row) are the worker's scratch.
  auto run_token = [&](std::int64_t t, std::vector<double>& a, std::vector<double>& sum) {
    const double* x = hidden_states.values.data() + t * hidden;
    std::fill(sum.begin(), sum.end(), 0.0);
    for (std::int64_t j = 0; j < k; ++j) {
      const auto e = static_cast<std::int64_t>(topk_ids.values[t * k + j]);
      const double weight = topk_weights.values[t * k + j];
      const double* gate_rows = w1.values.data() + e * 2 * inter * hidden;
      const double* up_rows = gate_rows + inter * hidden;
      for (std::int64_t n = 0; n < inter; ++n) {
        const double g = dot(gate_rows + n * hidden, x, hidden);
        const double u = dot(up_rows + n * hidden, x, hidden);
        a[n] = g / (1.0 + std::exp(-g)) * u;
      }
      const double* down_rows = w2.values.data() + e * hidden * inter;
      for (std::int64_t h = 0; h < hidden; ++h) {
        sum[h] += weight * dot(down_rows + h * inter, a.data(), inter);
      }
    }
    std::copy(sum.begin(), sum.end(), out.values.begin() + t * hidden);
  };

  // Small cases (the CPU suite's) stay on the calling thread.
  share_units(tokens, tokens * k * 3 * hidden * inter >= (std::int64_t{1} << 24), [&] {
    return [&, a = std::vector<double>(static_cast<std::size_t>(inter)),
            sum = std::vector<double>(static_cast<std::size_t>(hidden))](std::int64_t t) mutable {
      run_token(t, a, sum);
    };
  });
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("llm/fused_moe", fused_moe);

}  // namespace crucible::tasks
