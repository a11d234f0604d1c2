// Oracle of llm/rms_norm: out[t, i] = input[t, i] / sqrt(mean_j input[t, j]^2 + eps) * weight[i].
#include "tasks/oracle.hpp"

#include <cmath>

namespace crucible::tasks {
namespace {

core::Status rms_norm(const OracleCall& call) {
  const OracleTensor& input = call.tensor("input");
  const OracleTensor& weight = call.tensor("weight");
  OracleTensor& out = call.tensor("out");
  const std::int64_t tokens = call.symbol("num_tokens");
  const std::int64_t hidden = call.symbol("hidden_size");
  const double epsilon = call.scalar("epsilon");
  for (std::int64_t t = 0; t < tokens; ++t) {
    const double* row = input.values.data() + t * hidden;
    double sum = 0.0;
    for (std::int64_t i = 0; i < hidden; ++i) sum += row[i] * row[i];
    const double scale = 1.0 / std::sqrt(sum / static_cast<double>(hidden) + epsilon);
    for (std::int64_t i = 0; i < hidden; ++i) {
      out.values[t * hidden + i] = row[i] * scale * weight.values[i];
    }
  }
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("llm/rms_norm", rms_norm);

}  // namespace crucible::tasks
