// Oracle of ssm/causal_conv1d_fwd: width-4 depthwise causal convolution (+ SiLU) of each packed
// sequence, extended on the left by its conv state (or zeros), and the final conv states.
#include "tasks/oracle.hpp"

#include <cmath>
#include <set>
#include <string>
#include <vector>

namespace crucible::tasks {
namespace {

constexpr std::int64_t kWidth = 4;

core::Status causal_conv1d_fwd(const OracleCall& call) {
  const OracleTensor& x = call.tensor("x");
  const OracleTensor& weight = call.tensor("weight");
  const OracleTensor& bias = call.tensor("bias");
  const OracleTensor& bounds = call.tensor("query_start_loc");
  const OracleTensor& lines = call.tensor("cache_indices");
  const OracleTensor& initial = call.tensor("has_initial_state");
  OracleTensor& states = call.tensor("conv_states");
  OracleTensor& out = call.tensor("out");
  const std::int64_t tokens = call.symbol("num_tokens");
  const std::int64_t dim = call.symbol("dim");
  const std::int64_t seqs = call.symbol("num_seqs");
  const std::int64_t cache_lines = call.symbol("num_cache_lines");
  const bool silu = call.scalar("silu_activation") != 0.0;
  if (call.symbol("num_seq_bounds") != seqs + 1) {
    return core::Error{core::ErrorCode::kInvalidArgument, "num_seq_bounds is not num_seqs + 1"};
  }
  auto bound = [&](std::int64_t b) { return static_cast<std::int64_t>(bounds.values[b]); };
  if (bound(0) != 0 || bound(seqs) != tokens) {
    return core::Error{core::ErrorCode::kInvalidArgument,
                       "query_start_loc must start at 0 and end at num_tokens"};
  }
  std::set<std::int64_t> used;
  for (std::int64_t b = 0; b < seqs; ++b) {
    const auto line = static_cast<std::int64_t>(lines.values[b]);
    if (bound(b + 1) <= bound(b)) {
      return core::Error{core::ErrorCode::kInvalidArgument,
                         "sequence " + std::to_string(b) + " is empty or query_start_loc falls"};
    }
    if (line < 0 || line >= cache_lines || !used.insert(line).second) {
      return core::Error{core::ErrorCode::kInvalidArgument,
                         "cache index " + std::to_string(line) + " out of range or repeated"};
    }
  }
  const std::int64_t state_len = kWidth - 1;
  std::vector<double> ext;
  for (std::int64_t b = 0; b < seqs; ++b) {
    const std::int64_t start = bound(b), length = bound(b + 1) - start;
    double* state =
        states.values.data() + static_cast<std::int64_t>(lines.values[b]) * state_len * dim;
    const bool has_initial = initial.values[b] != 0.0;
    for (std::int64_t d = 0; d < dim; ++d) {
      // ext = the state (or zeros), then the sequence's inputs.
      ext.assign(static_cast<std::size_t>(state_len + length), 0.0);
      for (std::int64_t k = 0; k < state_len; ++k) {
        ext[k] = has_initial ? state[k * dim + d] : 0.0;
      }
      for (std::int64_t i = 0; i < length; ++i)
        ext[state_len + i] = x.values[(start + i) * dim + d];
      for (std::int64_t i = 0; i < length; ++i) {
        double y = bias.values[d];
        for (std::int64_t k = 0; k < kWidth; ++k) y += weight.values[d * kWidth + k] * ext[i + k];
        out.values[(start + i) * dim + d] = silu ? y / (1.0 + std::exp(-y)) : y;
      }
      for (std::int64_t k = 0; k < state_len; ++k) state[k * dim + d] = ext[length + k];
    }
  }
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("ssm/causal_conv1d_fwd", causal_conv1d_fwd);

}  // namespace crucible::tasks
