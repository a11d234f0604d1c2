// Oracle of llm/silu_and_mul_fp8_quant: result = e4m3(silu(gate) * up / scale), in double.
#include "tasks/oracle.hpp"

#include <cmath>

namespace crucible::tasks {
namespace {

// The exact y / scale, rounded once to e4m3 (round_to_dtype: to nearest even, through fp32,
// saturating at +-448, which is the op's clamp). How an implementation rounds silu and the
// product on the way (vLLM: to bf16, then times 1 / scale) is within the task's tolerance of
// one e4m3 step. silu(g) for g below about -709 is g / inf = -0, the right limit.
core::Status silu_and_mul_fp8_quant(const OracleCall& call) {
  const OracleTensor& input = call.tensor("input");
  const OracleTensor& scale = call.tensor("scale");
  OracleTensor& result = call.tensor("result");
  const std::int64_t rows = call.symbol("num_tokens");
  const std::int64_t d = call.symbol("d");
  const double s = scale.values[0];
  if (!(s > 0.0)) return core::Error{core::ErrorCode::kInvalidArgument, "scale must be positive"};
  for (std::int64_t t = 0; t < rows; ++t) {
    const double* gate = input.values.data() + t * 2 * d;
    const double* up = gate + d;
    double* y = result.values.data() + t * d;
    for (std::int64_t i = 0; i < d; ++i) {
      const double g = gate[i];
      y[i] = round_to_dtype(result.dtype, g / (1.0 + std::exp(-g)) * up[i] / s);
    }
  }
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("llm/silu_and_mul_fp8_quant", silu_and_mul_fp8_quant);

}  // namespace crucible::tasks
