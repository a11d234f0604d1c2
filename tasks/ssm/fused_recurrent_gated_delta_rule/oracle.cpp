// Oracle of ssm/fused_recurrent_gated_delta_rule: the gated delta rule's decode step in double:
// q and k optionally L2-normalised, the state decayed by exp(g), corrected towards v along k with
// strength beta, read out by q.
#include "tasks/oracle.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

namespace crucible::tasks {
namespace {

core::Status fused_recurrent_gated_delta_rule(const OracleCall& call) {
  const OracleTensor& q_in = call.tensor("q");
  const OracleTensor& k_in = call.tensor("k");
  const OracleTensor& v_in = call.tensor("v");
  const OracleTensor& g = call.tensor("g");
  const OracleTensor& beta = call.tensor("beta");
  OracleTensor& state = call.tensor("initial_state");
  const OracleTensor& lines = call.tensor("ssm_state_indices");
  OracleTensor& out = call.tensor("o");
  const std::int64_t seqs = call.symbol("num_seqs");
  const std::int64_t k_heads = call.symbol("num_k_heads");
  const std::int64_t v_heads = call.symbol("num_v_heads");
  const std::int64_t kdim = call.symbol("head_k_dim");
  const std::int64_t vdim = call.symbol("head_v_dim");
  const std::int64_t cache_lines = call.symbol("num_cache_lines");
  const double scale = call.scalar("scale");
  const bool l2norm = call.scalar("use_qk_l2norm_in_kernel") != 0.0;
  if (v_heads % k_heads != 0) {
    return core::Error{core::ErrorCode::kInvalidArgument,
                       "num_v_heads is not a multiple of num_k_heads"};
  }
  const std::int64_t v_per_k = v_heads / k_heads;
  std::set<std::int64_t> used;
  std::vector<double> q(static_cast<std::size_t>(kdim)), k(static_cast<std::size_t>(kdim));
  std::vector<double> hk(static_cast<std::size_t>(vdim)), hq(static_cast<std::size_t>(vdim));
  for (std::int64_t n = 0; n < seqs; ++n) {
    const auto line = static_cast<std::int64_t>(lines.values[static_cast<std::size_t>(n)]);
    if (line < 0 || line >= cache_lines || !used.insert(line).second) {
      return core::Error{core::ErrorCode::kInvalidArgument,
                         "state index " + std::to_string(line) + " out of range or repeated"};
    }
    for (std::int64_t hv = 0; hv < v_heads; ++hv) {
      const std::int64_t h = hv / v_per_k;
      const std::size_t qk_base = static_cast<std::size_t>((n * k_heads + h) * kdim);
      double qq = 0.0, kk = 0.0;
      for (std::int64_t i = 0; i < kdim; ++i) {
        const auto ii = static_cast<std::size_t>(i);
        q[ii] = q_in.values[qk_base + ii];
        k[ii] = k_in.values[qk_base + ii];
        qq += q[ii] * q[ii];
        kk += k[ii] * k[ii];
      }
      // FLA's in-kernel normalisation: x / sqrt(sum x^2 + 1e-6).
      const double q_norm = l2norm ? 1.0 / std::sqrt(qq + 1e-6) : 1.0;
      const double k_norm = l2norm ? 1.0 / std::sqrt(kk + 1e-6) : 1.0;
      for (std::int64_t i = 0; i < kdim; ++i) {
        q[static_cast<std::size_t>(i)] *= q_norm * scale;
        k[static_cast<std::size_t>(i)] *= k_norm;
      }
      const std::size_t head = static_cast<std::size_t>(n * v_heads + hv);
      const double decay = std::exp(g.values[head]);
      const double b = beta.values[head];
      double* h_kv = state.values.data() + (line * v_heads + hv) * kdim * vdim;
      // h <- exp(g) h;  v' = beta (v - h^T k);  h <- h + k v'^T;  o = h^T q.
      for (std::int64_t j = 0; j < vdim * kdim; ++j) h_kv[j] *= decay;
      std::fill(hk.begin(), hk.end(), 0.0);
      for (std::int64_t i = 0; i < kdim; ++i) {
        for (std::int64_t j = 0; j < vdim; ++j) {
          hk[static_cast<std::size_t>(j)] += h_kv[i * vdim + j] * k[static_cast<std::size_t>(i)];
        }
      }
      std::fill(hq.begin(), hq.end(), 0.0);
      for (std::int64_t i = 0; i < kdim; ++i) {
        for (std::int64_t j = 0; j < vdim; ++j) {
          const double vj =
              b *
              (v_in.values[head * static_cast<std::size_t>(vdim) + static_cast<std::size_t>(j)] -
               hk[static_cast<std::size_t>(j)]);
          double& cell = h_kv[i * vdim + j];
          cell += k[static_cast<std::size_t>(i)] * vj;
          hq[static_cast<std::size_t>(j)] += cell * q[static_cast<std::size_t>(i)];
        }
      }
      for (std::int64_t j = 0; j < vdim; ++j) {
        out.values[head * static_cast<std::size_t>(vdim) + static_cast<std::size_t>(j)] =
            hq[static_cast<std::size_t>(j)];
      }
    }
  }
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("ssm/fused_recurrent_gated_delta_rule", fused_recurrent_gated_delta_rule);

}  // namespace crucible::tasks
