// Oracle of ssm/causal_conv1d_update: one decode token per sequence convolved with its cached
// conv state (width 4, + SiLU), the state shifted; padding entries (-1) copy x and touch nothing.
#include "tasks/oracle.hpp"

#include <cmath>
#include <set>
#include <string>

namespace crucible::tasks {
namespace {

core::Status causal_conv1d_update(const OracleCall& call) {
  const OracleTensor& x = call.tensor("x");
  const OracleTensor& weight = call.tensor("weight");
  const OracleTensor& bias = call.tensor("bias");
  const OracleTensor& lines = call.tensor("conv_state_indices");
  OracleTensor& states = call.tensor("conv_states");
  OracleTensor& out = call.tensor("out");
  const std::int64_t seqs = call.symbol("num_seqs");
  const std::int64_t dim = call.symbol("dim");
  const std::int64_t cache_lines = call.symbol("num_cache_lines");
  const bool silu = call.scalar("silu_activation") != 0.0;
  std::set<std::int64_t> used;
  for (std::int64_t b = 0; b < seqs; ++b) {
    const auto line = static_cast<std::int64_t>(lines.values[static_cast<std::size_t>(b)]);
    const double* input = x.values.data() + b * dim;
    double* result = out.values.data() + b * dim;
    if (line == -1) {
      for (std::int64_t d = 0; d < dim; ++d) result[d] = input[d];
      continue;
    }
    if (line < 0 || line >= cache_lines || !used.insert(line).second) {
      return core::Error{core::ErrorCode::kInvalidArgument,
                         "conv state index " + std::to_string(line) + " out of range or repeated"};
    }
    double* state = states.values.data() + line * 3 * dim;
    for (std::int64_t d = 0; d < dim; ++d) {
      const double window[4] = {state[d], state[dim + d], state[2 * dim + d], input[d]};
      double y = bias.values[static_cast<std::size_t>(d)];
      for (std::int64_t k = 0; k < 4; ++k) {
        y += weight.values[static_cast<std::size_t>(d * 4 + k)] * window[k];
      }
      result[d] = silu ? y / (1.0 + std::exp(-y)) : y;
      for (std::int64_t k = 0; k < 3; ++k) state[k * dim + d] = window[k + 1];
    }
  }
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("ssm/causal_conv1d_update", causal_conv1d_update);

}  // namespace crucible::tasks
