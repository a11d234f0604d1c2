// Oracle of ssm/chunk_gated_delta_rule: the gated delta rule over a varlen prefill batch in
// double, token by token (the recurrence the chunked form rearranges): q and k L2-normalised,
// each sequence's state started from its initial state, its final state written out.
#include "tasks/oracle.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace crucible::tasks {
namespace {

core::Status chunk_gated_delta_rule(const OracleCall& call) {
  const OracleTensor& q_in = call.tensor("q");
  const OracleTensor& k_in = call.tensor("k");
  const OracleTensor& v_in = call.tensor("v");
  const OracleTensor& g = call.tensor("g");
  const OracleTensor& beta = call.tensor("beta");
  const OracleTensor& initial = call.tensor("initial_state");
  const OracleTensor& cu = call.tensor("cu_seqlens");
  OracleTensor& out = call.tensor("o");
  OracleTensor& final_state = call.tensor("final_state");
  const std::int64_t tokens = call.symbol("num_tokens");
  const std::int64_t seqs = call.symbol("num_seqs");
  const std::int64_t k_heads = call.symbol("num_k_heads");
  const std::int64_t v_heads = call.symbol("num_v_heads");
  const std::int64_t kdim = call.symbol("head_k_dim");
  const std::int64_t vdim = call.symbol("head_v_dim");
  const double scale = call.scalar("scale");
  if (v_heads % k_heads != 0) {
    return core::Error{core::ErrorCode::kInvalidArgument,
                       "num_v_heads is not a multiple of num_k_heads"};
  }
  if (call.symbol("num_seq_bounds") != seqs + 1) {
    return core::Error{core::ErrorCode::kInvalidArgument, "num_seq_bounds is not num_seqs + 1"};
  }
  for (std::int64_t n = 0; n <= seqs; ++n) {
    const double bound = cu.values[static_cast<std::size_t>(n)];
    const double previous = n == 0 ? -1.0 : cu.values[static_cast<std::size_t>(n - 1)];
    if ((n == 0 && bound != 0.0) || (n > 0 && bound <= previous) ||
        (n == seqs && bound != static_cast<double>(tokens))) {
      return core::Error{core::ErrorCode::kInvalidArgument,
                         "cu_seqlens must rise from 0 to num_tokens, every sequence non-empty"};
    }
  }
  const std::int64_t v_per_k = v_heads / k_heads;
  const auto K = static_cast<std::size_t>(kdim);
  const auto V = static_cast<std::size_t>(vdim);
  std::vector<double> q(K), k(K), hk(V);
  for (std::int64_t n = 0; n < seqs; ++n) {
    const auto begin = static_cast<std::int64_t>(cu.values[static_cast<std::size_t>(n)]);
    const auto end = static_cast<std::int64_t>(cu.values[static_cast<std::size_t>(n + 1)]);
    for (std::int64_t hv = 0; hv < v_heads; ++hv) {
      const std::int64_t h = hv / v_per_k;
      const std::size_t state_base = static_cast<std::size_t>(n * v_heads + hv) * K * V;
      double* state = final_state.values.data() + state_base;
      std::copy(initial.values.begin() + static_cast<std::ptrdiff_t>(state_base),
                initial.values.begin() + static_cast<std::ptrdiff_t>(state_base + K * V), state);
      for (std::int64_t t = begin; t < end; ++t) {
        const std::size_t qk_base = static_cast<std::size_t>(t * k_heads + h) * K;
        double qq = 0.0, kk = 0.0;
        for (std::size_t i = 0; i < K; ++i) {
          q[i] = q_in.values[qk_base + i];
          k[i] = k_in.values[qk_base + i];
          qq += q[i] * q[i];
          kk += k[i] * k[i];
        }
        // FLA's in-kernel normalisation: x / sqrt(sum x^2 + 1e-6).
        const double q_mul = scale / std::sqrt(qq + 1e-6);
        const double k_mul = 1.0 / std::sqrt(kk + 1e-6);
        for (std::size_t i = 0; i < K; ++i) {
          q[i] *= q_mul;
          k[i] *= k_mul;
        }
        const std::size_t head = static_cast<std::size_t>(t * v_heads + hv);
        const double decay = std::exp(g.values[head]);
        const double b = beta.values[head];
        // S <- exp(g) S;  u = beta (v - S^T k);  S <- S + k u^T;  o = S^T q.
        std::fill(hk.begin(), hk.end(), 0.0);
        for (std::size_t i = 0; i < K; ++i) {
          for (std::size_t j = 0; j < V; ++j) {
            double& cell = state[i * V + j];
            cell *= decay;
            hk[j] += cell * k[i];
          }
        }
        for (std::size_t j = 0; j < V; ++j) hk[j] = b * (v_in.values[head * V + j] - hk[j]);
        double* o = out.values.data() + head * V;
        std::fill(o, o + V, 0.0);
        for (std::size_t i = 0; i < K; ++i) {
          for (std::size_t j = 0; j < V; ++j) {
            double& cell = state[i * V + j];
            cell += k[i] * hk[j];
            o[j] += cell * q[i];
          }
        }
      }
    }
  }
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("ssm/chunk_gated_delta_rule", chunk_gated_delta_rule);

}  // namespace crucible::tasks
