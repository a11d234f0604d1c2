// Oracle of llm/per_token_group_quant_fp8: per-(token, 128-group) amax scale, x / scale to e4m3.
#include "tasks/oracle.hpp"

#include <algorithm>
#include <cmath>

namespace crucible::tasks {
namespace {

constexpr double kFp8Max = 448.0;
constexpr std::int64_t kGroupSize = 128;

// The oracle rounds where the op rounds: eps to fp32 (it is an f32 argument), the scale to fp32
// (an f32 output and the divisor of every element of its group), each quotient to fp32 and then
// to e4m3. A quotient of two fp32 values computed in double and rounded to float is the
// correctly rounded fp32 quotient (53 >= 2 * 24 + 2), and round_to_dtype takes it through float
// to e4m3 with round-to-nearest-even and saturation at +-448: vLLM's clamp and conversion.
core::Status per_token_group_quant_fp8(const OracleCall& call) {
  const OracleTensor& input = call.tensor("input");
  OracleTensor& out = call.tensor("out");
  OracleTensor& scale = call.tensor("scale");
  const std::int64_t tokens = call.symbol("num_tokens");
  const std::int64_t groups = call.symbol("num_groups");
  const double eps = round_to_dtype(core::DType::kF32, call.scalar("eps"));
  const bool column_major = call.scalar("column_major_scales") != 0.0;
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (std::int64_t g = 0; g < groups; ++g) {
      const std::int64_t base = (t * groups + g) * kGroupSize;
      const double* x = input.values.data() + base;
      double amax = eps;
      for (std::int64_t j = 0; j < kGroupSize; ++j) amax = std::max(amax, std::abs(x[j]));
      const double s = round_to_dtype(core::DType::kF32, amax / kFp8Max);
      scale.values[column_major ? g * tokens + t : t * groups + g] = s;
      for (std::int64_t j = 0; j < kGroupSize; ++j) {
        out.values[base + j] = round_to_dtype(out.dtype, x[j] / s);
      }
    }
  }
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("llm/per_token_group_quant_fp8", per_token_group_quant_fp8);

}  // namespace crucible::tasks
