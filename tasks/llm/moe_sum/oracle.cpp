// Oracle of llm/moe_sum: the float64 sum of each token's topk slots.
#include "tasks/oracle.hpp"

#include <cstdint>

namespace crucible::tasks {
namespace {

core::Status moe_sum(const OracleCall& call) {
  const OracleTensor& input = call.tensor("input");
  OracleTensor& output = call.tensor("output");
  const std::int64_t tokens = call.symbol("num_tokens");
  const std::int64_t k = call.symbol("topk");
  const std::int64_t hidden = call.symbol("hidden_size");
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (std::int64_t i = 0; i < hidden; ++i) {
      double sum = 0.0;
      for (std::int64_t j = 0; j < k; ++j) sum += input.values[(t * k + j) * hidden + i];
      output.values[t * hidden + i] = sum;
    }
  }
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("llm/moe_sum", moe_sum);

}  // namespace crucible::tasks
