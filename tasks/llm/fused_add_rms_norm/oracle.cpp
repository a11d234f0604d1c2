// Oracle of llm/fused_add_rms_norm: residual <- bf16(input + residual); input <- rms_norm(that).
#include "tasks/oracle.hpp"

#include <cmath>

namespace crucible::tasks {
namespace {

// The op stores the sum input + residual in bf16 and normalises what it stored: the rounded
// sum is an output (the residual stream the next layer adds to), and the sum of squares in vLLM
// is taken over the rounded values. So the oracle rounds the sum to bf16 exactly as the kernel
// does (an fp32 add of two bf16 values, then round-to-nearest-even), and computes the norm of
// the rounded row in double. The normalised output is left unrounded, like rms_norm's: how a
// kernel rounds x * rsqrt * weight (once, or twice as vLLM does) is within the tolerance.
core::Status fused_add_rms_norm(const OracleCall& call) {
  OracleTensor& input = call.tensor("input");
  OracleTensor& residual = call.tensor("residual");
  const OracleTensor& weight = call.tensor("weight");
  const std::int64_t tokens = call.symbol("num_tokens");
  const std::int64_t hidden = call.symbol("hidden_size");
  const double epsilon = call.scalar("epsilon");
  for (std::int64_t t = 0; t < tokens; ++t) {
    double* x = input.values.data() + t * hidden;
    double* r = residual.values.data() + t * hidden;
    double sum = 0.0;
    for (std::int64_t i = 0; i < hidden; ++i) {
      // x and r are bf16 values, so x + r is exact in double (for any two whose exponents are
      // under 45 apart: every generated case); rounding it through float then to bf16 is what
      // an fp32 add followed by a bf16 store does.
      r[i] = round_to_dtype(residual.dtype, x[i] + r[i]);
      sum += r[i] * r[i];
    }
    const double scale = 1.0 / std::sqrt(sum / static_cast<double>(hidden) + epsilon);
    for (std::int64_t i = 0; i < hidden; ++i) x[i] = r[i] * scale * weight.values[i];
  }
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("llm/fused_add_rms_norm", fused_add_rms_norm);

}  // namespace crucible::tasks
