// Oracle of llm/silu_and_mul: out[t, i] = silu(input[t, 0, i]) * input[t, 1, i], in double.
#include "tasks/oracle.hpp"

#include <cmath>

namespace crucible::tasks {
namespace {

// silu(g) = g / (1 + exp(-g)). For g below about -709, exp(-g) overflows to inf in double too,
// and g / inf = -0: the correct limit (the true value is below 1e-305).
core::Status silu_and_mul(const OracleCall& call) {
  const OracleTensor& input = call.tensor("input");
  OracleTensor& out = call.tensor("out");
  const std::int64_t rows = call.symbol("num_tokens");
  const std::int64_t d = call.symbol("d");
  for (std::int64_t t = 0; t < rows; ++t) {
    const double* gate = input.values.data() + t * 2 * d;
    const double* up = gate + d;
    double* y = out.values.data() + t * d;
    for (std::int64_t i = 0; i < d; ++i) {
      const double g = gate[i];
      y[i] = g / (1.0 + std::exp(-g)) * up[i];
    }
  }
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("llm/silu_and_mul", silu_and_mul);

}  // namespace crucible::tasks
