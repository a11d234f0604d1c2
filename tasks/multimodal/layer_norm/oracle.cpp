// Oracle of multimodal/layer_norm: out = (x - mean) / sqrt(var + eps) * weight + bias per row.
#include "tasks/oracle.hpp"

#include <cmath>

namespace crucible::tasks {
namespace {

core::Status layer_norm(const OracleCall& call) {
  const OracleTensor& input = call.tensor("input");
  const OracleTensor& weight = call.tensor("weight");
  const OracleTensor& bias = call.tensor("bias");
  OracleTensor& out = call.tensor("out");
  const std::int64_t tokens = call.symbol("num_tokens");
  const std::int64_t hidden = call.symbol("hidden_size");
  const double epsilon = call.scalar("epsilon");
  for (std::int64_t t = 0; t < tokens; ++t) {
    const double* row = input.values.data() + t * hidden;
    double sum = 0.0;
    for (std::int64_t i = 0; i < hidden; ++i) sum += row[i];
    const double mean = sum / static_cast<double>(hidden);
    double squares = 0.0;
    for (std::int64_t i = 0; i < hidden; ++i) squares += (row[i] - mean) * (row[i] - mean);
    const double inv_std = 1.0 / std::sqrt(squares / static_cast<double>(hidden) + epsilon);
    for (std::int64_t i = 0; i < hidden; ++i) {
      out.values[t * hidden + i] = (row[i] - mean) * inv_std * weight.values[i] + bias.values[i];
    }
  }
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("multimodal/layer_norm", layer_norm);

}  // namespace crucible::tasks
