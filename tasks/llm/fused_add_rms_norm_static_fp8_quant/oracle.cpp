// Oracle of llm/fused_add_rms_norm_static_fp8_quant: residual <- bf16(input + residual);
// result <- e4m3(rms_norm(residual) * weight / scale).
#include "tasks/oracle.hpp"

#include <cmath>

namespace crucible::tasks {
namespace {

// The stored sum is an output and the norm is taken over it, so the oracle rounds the sum to
// bf16 as the op does (an fp32 add of two bf16 values, then round-to-nearest-even; exact in
// double first). The normalised value and its quotient by the scale are exact, rounded once to
// e4m3 (round_to_dtype: through fp32, to nearest even, saturating at +-448: the op's clamp);
// how an implementation rounds on the way (vLLM: twice to bf16, then times 1 / scale) is within
// the task's tolerance of one e4m3 step.
core::Status fused_add_rms_norm_static_fp8_quant(const OracleCall& call) {
  const OracleTensor& input = call.tensor("input");
  OracleTensor& residual = call.tensor("residual");
  const OracleTensor& weight = call.tensor("weight");
  const OracleTensor& scale = call.tensor("scale");
  OracleTensor& result = call.tensor("result");
  const std::int64_t tokens = call.symbol("num_tokens");
  const std::int64_t hidden = call.symbol("hidden_size");
  const double epsilon = call.scalar("epsilon");
  const double s = scale.values[0];
  if (!(s > 0.0)) return core::Error{core::ErrorCode::kInvalidArgument, "scale must be positive"};
  for (std::int64_t t = 0; t < tokens; ++t) {
    const double* x = input.values.data() + t * hidden;
    double* r = residual.values.data() + t * hidden;
    double* y = result.values.data() + t * hidden;
    double sum = 0.0;
    for (std::int64_t i = 0; i < hidden; ++i) {
      r[i] = round_to_dtype(residual.dtype, x[i] + r[i]);
      sum += r[i] * r[i];
    }
    const double inv_rms = 1.0 / std::sqrt(sum / static_cast<double>(hidden) + epsilon);
    for (std::int64_t i = 0; i < hidden; ++i) {
      y[i] = round_to_dtype(result.dtype, r[i] * inv_rms * weight.values[i] / s);
    }
  }
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("llm/fused_add_rms_norm_static_fp8_quant", fused_add_rms_norm_static_fp8_quant);

}  // namespace crucible::tasks
