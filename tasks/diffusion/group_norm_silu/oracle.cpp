// Oracle of diffusion/group_norm_silu: GroupNorm over (C/G, H, W) per sample, affine per channel,
// then SiLU.
#include "tasks/oracle.hpp"

#include <cmath>

namespace crucible::tasks {
namespace {

core::Status group_norm_silu(const OracleCall& call) {
  const OracleTensor& input = call.tensor("input");
  const OracleTensor& weight = call.tensor("weight");
  const OracleTensor& bias = call.tensor("bias");
  OracleTensor& out = call.tensor("out");
  const std::int64_t batch = call.symbol("batch");
  const std::int64_t channels = call.symbol("channels");
  const std::int64_t groups = call.symbol("num_groups");
  const std::int64_t hw = call.symbol("height") * call.symbol("width");
  const double epsilon = call.scalar("epsilon");
  if (channels % groups != 0) {
    return core::Error{core::ErrorCode::kInvalidArgument,
                       "channels must be a multiple of num_groups"};
  }
  const std::int64_t per_group = channels / groups;
  const std::int64_t group_elems = per_group * hw;
  for (std::int64_t n = 0; n < batch; ++n) {
    for (std::int64_t g = 0; g < groups; ++g) {
      const std::int64_t start = (n * groups + g) * group_elems;
      const double* x = input.values.data() + start;
      double sum = 0.0;
      for (std::int64_t i = 0; i < group_elems; ++i) sum += x[i];
      const double mean = sum / static_cast<double>(group_elems);
      double squares = 0.0;
      for (std::int64_t i = 0; i < group_elems; ++i) squares += (x[i] - mean) * (x[i] - mean);
      const double inv_std = 1.0 / std::sqrt(squares / static_cast<double>(group_elems) + epsilon);
      for (std::int64_t i = 0; i < group_elems; ++i) {
        const std::int64_t c = g * per_group + i / hw;
        const double v = (x[i] - mean) * inv_std * weight.values[c] + bias.values[c];
        out.values[start + i] = v / (1.0 + std::exp(-v));
      }
    }
  }
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("diffusion/group_norm_silu", group_norm_silu);

}  // namespace crucible::tasks
