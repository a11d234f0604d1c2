// Oracle of diffusion/qk_rmsnorm_rope: per-head RMSNorm of query and key, then the interleaved
// rotation by the table row of each token's position in its sequence.
#include "tasks/oracle.hpp"

#include <cmath>
#include <vector>

namespace crucible::tasks {
namespace {

void norm_rope(OracleTensor& x, const OracleTensor& weight, const OracleTensor& table,
               std::int64_t rows, std::int64_t seq_len, std::int64_t heads, std::int64_t dim,
               double epsilon) {
  std::vector<double> n(static_cast<std::size_t>(dim));
  const std::int64_t half = dim / 2;
  for (std::int64_t row = 0; row < rows; ++row) {
    double* v = x.values.data() + row * dim;
    double squares = 0.0;
    for (std::int64_t i = 0; i < dim; ++i) squares += v[i] * v[i];
    const double inv_rms = 1.0 / std::sqrt(squares / static_cast<double>(dim) + epsilon);
    for (std::int64_t i = 0; i < dim; ++i) n[i] = v[i] * inv_rms * weight.values[i];
    const double* angles = table.values.data() + ((row / heads) % seq_len) * dim;
    for (std::int64_t k = 0; k < half; ++k) {
      const double c = angles[k];
      const double t = angles[half + k];
      v[2 * k] = n[2 * k] * c - n[2 * k + 1] * t;
      v[2 * k + 1] = n[2 * k + 1] * c + n[2 * k] * t;
    }
  }
}

core::Status qk_rmsnorm_rope(const OracleCall& call) {
  const std::int64_t batch = call.symbol("batch");
  const std::int64_t seq_len = call.symbol("seq_len");
  const std::int64_t heads = call.symbol("num_heads");
  const std::int64_t dim = call.symbol("head_dim");
  if (dim % 2 != 0) {
    return core::Error{core::ErrorCode::kInvalidArgument, "head_dim must be even"};
  }
  const double epsilon = call.scalar("epsilon");
  const OracleTensor& table = call.tensor("cos_sin");
  const std::int64_t rows = batch * seq_len * heads;
  norm_rope(call.tensor("query"), call.tensor("q_weight"), table, rows, seq_len, heads, dim,
            epsilon);
  norm_rope(call.tensor("key"), call.tensor("k_weight"), table, rows, seq_len, heads, dim, epsilon);
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("diffusion/qk_rmsnorm_rope", qk_rmsnorm_rope);

}  // namespace crucible::tasks
