// Oracle of llm/fp8_scaled_linear: out[t, n] = a_scales[t] * b_scales[n] * sum_k a[t, k] * b[n, k]
// in double from the decoded e4m3 and f32 values (every e4m3 product, and every sum the GPU
// suite's cases produce, is exact in double); the sums are matmul_nt's.
#include "tasks/oracle.hpp"

namespace crucible::tasks {
namespace {

core::Status fp8_scaled_linear(const OracleCall& call) {
  const OracleTensor& a = call.tensor("a");
  const OracleTensor& b = call.tensor("b");
  const OracleTensor& a_scales = call.tensor("a_scales");
  const OracleTensor& b_scales = call.tensor("b_scales");
  OracleTensor& out = call.tensor("out");
  const std::int64_t tokens = call.symbol("num_tokens");
  const std::int64_t k_size = call.symbol("in_features");
  const std::int64_t n_size = call.symbol("out_features");
  matmul_nt(a.values.data(), b.values.data(), out.values.data(), tokens, k_size, n_size);
  for (std::int64_t t = 0; t < tokens; ++t) {
    const double token_scale = a_scales.values[static_cast<std::size_t>(t)];
    for (std::int64_t n = 0; n < n_size; ++n) {
      double& value = out.values[static_cast<std::size_t>(t * n_size + n)];
      value = token_scale * b_scales.values[static_cast<std::size_t>(n)] * value;
    }
  }
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("llm/fp8_scaled_linear", fp8_scaled_linear);

}  // namespace crucible::tasks
