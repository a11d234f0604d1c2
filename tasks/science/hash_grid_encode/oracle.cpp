// Oracle of science/hash_grid_encode: tiny-cuda-nn's hash grid encoding (trilinear blend of the
// 8 corners of each level's cell, dense or hashed indexing), in float64.
#include "tasks/oracle.hpp"

#include <cmath>
#include <cstdint>

namespace crucible::tasks {
namespace {

core::Status hash_grid_encode(const OracleCall& call) {
  const OracleTensor& positions = call.tensor("positions");
  const OracleTensor& table = call.tensor("table");
  OracleTensor& out = call.tensor("out");
  const std::int64_t points = call.symbol("num_points");
  const std::int64_t levels = call.symbol("num_levels");
  const std::int64_t size = call.symbol("table_size");
  const double base = call.scalar("base_resolution");
  const double growth = call.scalar("per_level_scale");
  if (size <= 0 || (size & (size - 1)) != 0 || size > (std::int64_t{1} << 32)) {
    return core::Error{core::ErrorCode::kInvalidArgument,
                       "hash_grid_encode: table_size must be a power of two up to 2^32"};
  }
  for (std::int64_t l = 0; l < levels; ++l) {
    const double scale = base * std::pow(growth, static_cast<double>(l)) - 1.0;
    const auto resolution = static_cast<std::uint64_t>(std::ceil(scale)) + 1;
    const bool dense = resolution * resolution * resolution <= static_cast<std::uint64_t>(size);
    const auto r32 = static_cast<std::uint32_t>(resolution);
    for (std::int64_t n = 0; n < points; ++n) {
      double p[3];
      double f[3];
      std::uint32_t g[3];
      for (int d = 0; d < 3; ++d) {
        p[d] = positions.values[n * 3 + d] * scale + 0.5;
        const double floor_p = std::floor(p[d]);
        f[d] = p[d] - floor_p;
        g[d] = static_cast<std::uint32_t>(floor_p);
      }
      double sum[2] = {0.0, 0.0};
      for (int o = 0; o < 8; ++o) {
        const std::uint32_t x = g[0] + (o & 1);
        const std::uint32_t y = g[1] + ((o >> 1) & 1);
        const std::uint32_t z = g[2] + ((o >> 2) & 1);
        const std::uint32_t index =
            dense ? x + y * r32 + z * r32 * r32 : x ^ (y * 2654435761u) ^ (z * 805459861u);
        const std::int64_t entry =
            static_cast<std::int64_t>(index % static_cast<std::uint64_t>(size));
        const double w = ((o & 1) ? f[0] : 1.0 - f[0]) * ((o & 2) ? f[1] : 1.0 - f[1]) *
                         ((o & 4) ? f[2] : 1.0 - f[2]);
        for (int k = 0; k < 2; ++k) sum[k] += w * table.values[(l * size + entry) * 2 + k];
      }
      out.values[(n * levels + l) * 2] = sum[0];
      out.values[(n * levels + l) * 2 + 1] = sum[1];
    }
  }
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("science/hash_grid_encode", hash_grid_encode);

}  // namespace crucible::tasks
