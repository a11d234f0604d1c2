// Oracle of llm/dynamic_per_token_scaled_fp8_quant: per-token amax scale, x / scale to e4m3.
#include "tasks/oracle.hpp"

#include <algorithm>
#include <cmath>

namespace crucible::tasks {
namespace {

constexpr double kFp8Max = 448.0;

// Quantization is the op's definition, so the oracle rounds where the op rounds: the scale to
// fp32 (it is an f32 output, and the divisor of every element) and each quotient to fp32 and
// then to e4m3. Both quotients are of two fp32 values, so computing them in double and rounding
// to float gives the correctly rounded fp32 quotient (53 >= 2 * 24 + 2: the double rounding is
// innocuous; round_to_dtype rounds through float), and then takes that float to e4m3 with
// round-to-nearest-even and saturation at +-448, which is vLLM's clamp followed by its conversion.
core::Status dynamic_per_token_scaled_fp8_quant(const OracleCall& call) {
  const OracleTensor& input = call.tensor("input");
  OracleTensor& out = call.tensor("out");
  OracleTensor& scale = call.tensor("scale");
  const std::int64_t tokens = call.symbol("num_tokens");
  const std::int64_t hidden = call.symbol("hidden_size");
  const double min_scale = round_to_dtype(core::DType::kF32, 1.0 / (kFp8Max * 512.0));
  for (std::int64_t t = 0; t < tokens; ++t) {
    const double* x = input.values.data() + t * hidden;
    double amax = 0.0;
    for (std::int64_t i = 0; i < hidden; ++i) amax = std::max(amax, std::abs(x[i]));
    const double s = std::max(round_to_dtype(core::DType::kF32, amax / kFp8Max), min_scale);
    scale.values[t] = s;
    for (std::int64_t i = 0; i < hidden; ++i) {
      out.values[t * hidden + i] = round_to_dtype(out.dtype, x[i] / s);
    }
  }
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("llm/dynamic_per_token_scaled_fp8_quant", dynamic_per_token_scaled_fp8_quant);

}  // namespace crucible::tasks
