// Oracle of ssm/selective_state_update: the Mamba-2 decode step in double: softplus(dt +
// dt_bias) per head, the state decayed by exp(A dt') plus dt' B x, read out by C, plus D x.
#include "tasks/oracle.hpp"

#include <cmath>
#include <set>
#include <string>

namespace crucible::tasks {
namespace {

// mamba_ssm's softplus: log(1 + exp(v)), and v itself above 20 (where the two agree to 2e-9).
double softplus(double v) { return v <= 20.0 ? std::log1p(std::exp(v)) : v; }

core::Status selective_state_update(const OracleCall& call) {
  OracleTensor& state = call.tensor("state");
  const OracleTensor& x = call.tensor("x");
  const OracleTensor& dt = call.tensor("dt");
  const OracleTensor& a = call.tensor("A");
  const OracleTensor& b_in = call.tensor("B");
  const OracleTensor& c_in = call.tensor("C");
  const OracleTensor& d_skip = call.tensor("D");
  const OracleTensor& dt_bias = call.tensor("dt_bias");
  const OracleTensor& lines = call.tensor("state_batch_indices");
  OracleTensor& out = call.tensor("out");
  const std::int64_t seqs = call.symbol("num_seqs");
  const std::int64_t heads = call.symbol("nheads");
  const std::int64_t headdim = call.symbol("headdim");
  const std::int64_t dstate = call.symbol("dstate");
  const std::int64_t groups = call.symbol("ngroups");
  const std::int64_t cache_lines = call.symbol("num_cache_lines");
  if (heads % groups != 0) {
    return core::Error{core::ErrorCode::kInvalidArgument, "nheads is not a multiple of ngroups"};
  }
  const std::int64_t heads_per_group = heads / groups;
  std::set<std::int64_t> used;
  for (std::int64_t b = 0; b < seqs; ++b) {
    const auto line = static_cast<std::int64_t>(lines.values[static_cast<std::size_t>(b)]);
    if (line < 0 || line >= cache_lines || !used.insert(line).second) {
      return core::Error{core::ErrorCode::kInvalidArgument,
                         "state index " + std::to_string(line) + " out of range or repeated"};
    }
    for (std::int64_t h = 0; h < heads; ++h) {
      const std::int64_t g = h / heads_per_group;
      const auto hh = static_cast<std::size_t>(h);
      const double delta =
          softplus(dt.values[static_cast<std::size_t>(b * heads + h)] + dt_bias.values[hh]);
      const double decay = std::exp(a.values[hh] * delta);
      const double* bv = b_in.values.data() + (b * groups + g) * dstate;
      const double* cv = c_in.values.data() + (b * groups + g) * dstate;
      for (std::int64_t p = 0; p < headdim; ++p) {
        const double xv = x.values[static_cast<std::size_t>((b * heads + h) * headdim + p)];
        double* row = state.values.data() + ((line * heads + h) * headdim + p) * dstate;
        double y = 0.0;
        for (std::int64_t n = 0; n < dstate; ++n) {
          row[n] = row[n] * decay + delta * bv[n] * xv;
          y += row[n] * cv[n];
        }
        out.values[static_cast<std::size_t>((b * heads + h) * headdim + p)] =
            y + d_skip.values[hh] * xv;
      }
    }
  }
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("ssm/selective_state_update", selective_state_update);

}  // namespace crucible::tasks
