// Oracle of diffusion/adaln_modulate: LayerNorm without affine, then * (1 + scale[b]) + shift[b].
#include "tasks/oracle.hpp"

#include <cmath>

namespace crucible::tasks {
namespace {

core::Status adaln_modulate(const OracleCall& call) {
  const OracleTensor& input = call.tensor("input");
  const OracleTensor& scale = call.tensor("scale");
  const OracleTensor& shift = call.tensor("shift");
  OracleTensor& out = call.tensor("out");
  const std::int64_t batch = call.symbol("batch");
  const std::int64_t seq = call.symbol("seq_len");
  const std::int64_t hidden = call.symbol("hidden_size");
  const double epsilon = call.scalar("epsilon");
  for (std::int64_t b = 0; b < batch; ++b) {
    const double* sc = scale.values.data() + b * hidden;
    const double* sh = shift.values.data() + b * hidden;
    for (std::int64_t s = 0; s < seq; ++s) {
      const std::int64_t row_offset = (b * seq + s) * hidden;
      const double* row = input.values.data() + row_offset;
      double sum = 0.0;
      for (std::int64_t i = 0; i < hidden; ++i) sum += row[i];
      const double mean = sum / static_cast<double>(hidden);
      double squares = 0.0;
      for (std::int64_t i = 0; i < hidden; ++i) squares += (row[i] - mean) * (row[i] - mean);
      const double inv_std = 1.0 / std::sqrt(squares / static_cast<double>(hidden) + epsilon);
      for (std::int64_t i = 0; i < hidden; ++i) {
        out.values[row_offset + i] = (row[i] - mean) * inv_std * (1.0 + sc[i]) + sh[i];
      }
    }
  }
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("diffusion/adaln_modulate", adaln_modulate);

}  // namespace crucible::tasks
