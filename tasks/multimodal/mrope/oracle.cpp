// Oracle of multimodal/mrope: every head of query and key rotated NeoX style, each frequency by
// the angle of the position of its M-RoPE section (temporal, height or width) read from
// cos_sin_cache.
#include "tasks/oracle.hpp"

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace crucible::tasks {
namespace {

// Rotates `heads` heads of `head_size` values in place, starting at `values`; rows[k] is the
// cache row (cos half, then sin half) of frequency k.
void rotate_heads(double* values, std::int64_t heads, std::int64_t head_size,
                  const std::vector<const double*>& rows) {
  const std::int64_t half = head_size / 2;
  for (std::int64_t h = 0; h < heads; ++h) {
    double* head = values + h * head_size;
    for (std::int64_t k = 0; k < half; ++k) {
      const double c = rows[static_cast<std::size_t>(k)][k];
      const double s = rows[static_cast<std::size_t>(k)][half + k];
      const double x = head[k];
      const double y = head[half + k];
      head[k] = x * c - y * s;
      head[half + k] = y * c + x * s;
    }
  }
}

core::Status mrope(const OracleCall& call) {
  const OracleTensor& positions = call.tensor("positions");
  const OracleTensor& cache = call.tensor("cos_sin_cache");
  OracleTensor& query = call.tensor("query");
  OracleTensor& key = call.tensor("key");
  const std::int64_t tokens = call.symbol("num_tokens");
  const std::int64_t num_heads = call.symbol("num_heads");
  const std::int64_t num_kv_heads = call.symbol("num_kv_heads");
  const std::int64_t head_size = call.symbol("head_size");
  const std::int64_t max_position = call.symbol("max_position");
  const std::array<std::int64_t, 3> section{call.symbol("mrope_section_t"),
                                            call.symbol("mrope_section_h"),
                                            call.symbol("mrope_section_w")};
  if (head_size % 2 != 0 || section[0] + section[1] + section[2] != head_size / 2) {
    return core::Error{core::ErrorCode::kInvalidArgument,
                       "mrope_section must split head_size / 2 = " + std::to_string(head_size / 2) +
                           " frequencies, got " + std::to_string(section[0]) + " + " +
                           std::to_string(section[1]) + " + " + std::to_string(section[2])};
  }
  const std::int64_t half = head_size / 2;
  // The section of each frequency: the first section[0] temporal, then height, then width.
  std::vector<int> section_of(static_cast<std::size_t>(half));
  for (std::int64_t k = 0, s = 0, end = section[0]; k < half; ++k) {
    while (k >= end) end += section[static_cast<std::size_t>(++s)];
    section_of[static_cast<std::size_t>(k)] = static_cast<int>(s);
  }
  std::vector<const double*> rows(static_cast<std::size_t>(half));
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (std::int64_t k = 0; k < half; ++k) {
      const int s = section_of[static_cast<std::size_t>(k)];
      const double position = positions.values[static_cast<std::size_t>(s * tokens + t)];
      if (!(position >= 0.0 && position < static_cast<double>(max_position))) {
        return core::Error{core::ErrorCode::kInvalidArgument,
                           "positions[" + std::to_string(s) + ", " + std::to_string(t) +
                               "] = " + std::to_string(position) + " is outside the cache of " +
                               std::to_string(max_position) + " rows"};
      }
      rows[static_cast<std::size_t>(k)] =
          cache.values.data() + static_cast<std::int64_t>(position) * head_size;
    }
    rotate_heads(query.values.data() + t * num_heads * head_size, num_heads, head_size, rows);
    rotate_heads(key.values.data() + t * num_kv_heads * head_size, num_kv_heads, head_size, rows);
  }
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("multimodal/mrope", mrope);

}  // namespace crucible::tasks
