// Oracle of world/rope_3d: V-JEPA 2's 3-D rotary embedding of the query and key slots of qkv,
// in float64, the value slot copied through.
#include "tasks/oracle.hpp"

#include <cmath>
#include <vector>

namespace crucible::tasks {
namespace {

core::Status rope_3d(const OracleCall& call) {
  OracleTensor& qkv = call.tensor("qkv");
  const OracleTensor& ids = call.tensor("token_ids");
  const std::int64_t tokens = call.symbol("batch") * call.symbol("num_tokens");
  const std::int64_t heads = call.symbol("num_heads");
  const std::int64_t dim = call.symbol("head_dim");
  const std::int64_t grid_h = call.symbol("grid_h");
  const std::int64_t grid_w = call.symbol("grid_w");
  if (dim % 2 != 0) return core::Error{core::ErrorCode::kInvalidArgument, "odd head_dim"};
  const std::int64_t s = 2 * ((dim / 3) / 2);
  const std::int64_t half = s / 2;
  std::vector<double> head(static_cast<std::size_t>(dim));
  for (std::int64_t t = 0; t < tokens; ++t) {
    const auto n = static_cast<std::int64_t>(ids.values[t]);
    const std::int64_t plane = grid_h * grid_w;
    const std::int64_t position[3] = {n / plane, (n % plane) / grid_w, n % grid_w};
    for (std::int64_t h = 0; h < 2 * heads; ++h) {  // query heads, then key heads
      double* x = qkv.values.data() + (t * 3 * heads + h) * dim;
      head.assign(x, x + dim);
      for (std::int64_t c = 0; c < 3 * s; ++c) {
        const std::int64_t axis = c / s;
        const std::int64_t j = (c - axis * s) % half;
        const double theta = static_cast<double>(position[axis]) *
                             std::pow(10000.0, -static_cast<double>(j) / static_cast<double>(half));
        const double partner = c % 2 == 0 ? -head[c + 1] : head[c - 1];
        x[c] = head[c] * std::cos(theta) + partner * std::sin(theta);
      }
    }
  }
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("world/rope_3d", rope_3d);

}  // namespace crucible::tasks
