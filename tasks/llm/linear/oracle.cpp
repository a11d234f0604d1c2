// Oracle of llm/linear: out[t, n] = sum_k input[t, k] * weight[n, k], in double (matmul_nt, which
// shares the rows out among threads for prefill-sized cases).
#include "tasks/oracle.hpp"

namespace crucible::tasks {
namespace {

core::Status linear(const OracleCall& call) {
  const OracleTensor& input = call.tensor("input");
  const OracleTensor& weight = call.tensor("weight");
  OracleTensor& out = call.tensor("out");
  const std::int64_t tokens = call.symbol("num_tokens");
  const std::int64_t k_size = call.symbol("in_features");
  const std::int64_t n_size = call.symbol("out_features");
  matmul_nt(input.values.data(), weight.values.data(), out.values.data(), tokens, k_size, n_size);
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("llm/linear", linear);

}  // namespace crucible::tasks
