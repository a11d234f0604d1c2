// Oracle of multimodal/gelu_tanh_and_mul: out = gelu_tanh(gate) * up, gelu with the tanh form.
#include "tasks/oracle.hpp"

#include <cmath>

namespace crucible::tasks {
namespace {

double gelu_tanh(double g) {
  const double sqrt_2_over_pi = 0.7978845608028654;  // sqrt(2 / pi)
  return 0.5 * g * (1.0 + std::tanh(sqrt_2_over_pi * (g + 0.044715 * g * g * g)));
}

core::Status gelu_tanh_and_mul(const OracleCall& call) {
  const OracleTensor& input = call.tensor("input");
  OracleTensor& out = call.tensor("out");
  const std::int64_t tokens = call.symbol("num_tokens");
  const std::int64_t d = call.symbol("d");
  for (std::int64_t t = 0; t < tokens; ++t) {
    const double* gate = input.values.data() + t * 2 * d;
    const double* up = gate + d;
    for (std::int64_t i = 0; i < d; ++i) out.values[t * d + i] = gelu_tanh(gate[i]) * up[i];
  }
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("multimodal/gelu_tanh_and_mul", gelu_tanh_and_mul);

}  // namespace crucible::tasks
