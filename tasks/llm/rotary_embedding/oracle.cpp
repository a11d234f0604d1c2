// Oracle of llm/rotary_embedding: every head of query and key rotated pairwise by the angles of
// its token's position, read from cos_sin_cache (NeoX halves or GPT-J interleaved pairs).
#include "tasks/oracle.hpp"

#include <string>

namespace crucible::tasks {
namespace {

// Rotates `heads` heads of `head_size` values in place, starting at `values`.
void rotate_heads(double* values, std::int64_t heads, std::int64_t head_size, const double* cos,
                  const double* sin, bool is_neox) {
  const std::int64_t half = head_size / 2;
  for (std::int64_t h = 0; h < heads; ++h) {
    double* head = values + h * head_size;
    for (std::int64_t k = 0; k < half; ++k) {
      const std::int64_t xi = is_neox ? k : 2 * k;
      const std::int64_t yi = is_neox ? half + k : 2 * k + 1;
      const double x = head[xi];
      const double y = head[yi];
      head[xi] = x * cos[k] - y * sin[k];
      head[yi] = y * cos[k] + x * sin[k];
    }
  }
}

core::Status rotary_embedding(const OracleCall& call) {
  const OracleTensor& positions = call.tensor("positions");
  const OracleTensor& cache = call.tensor("cos_sin_cache");
  OracleTensor& query = call.tensor("query");
  OracleTensor& key = call.tensor("key");
  const std::int64_t tokens = call.symbol("num_tokens");
  const std::int64_t num_heads = call.symbol("num_heads");
  const std::int64_t num_kv_heads = call.symbol("num_kv_heads");
  const std::int64_t head_size = call.symbol("head_size");
  const std::int64_t max_position = call.symbol("max_position");
  const bool is_neox = call.scalar("is_neox") != 0.0;
  if (head_size % 2 != 0) {
    return core::Error{core::ErrorCode::kInvalidArgument,
                       "head_size must be even, got " + std::to_string(head_size)};
  }
  const std::int64_t half = head_size / 2;
  for (std::int64_t t = 0; t < tokens; ++t) {
    const double position = positions.values[t];
    if (!(position >= 0.0 && position < static_cast<double>(max_position))) {
      return core::Error{core::ErrorCode::kInvalidArgument,
                         "positions[" + std::to_string(t) + "] = " + std::to_string(position) +
                             " is outside the cache of " + std::to_string(max_position) + " rows"};
    }
    const double* cos = cache.values.data() + static_cast<std::int64_t>(position) * head_size;
    const double* sin = cos + half;
    rotate_heads(query.values.data() + t * num_heads * head_size, num_heads, head_size, cos, sin,
                 is_neox);
    rotate_heads(key.values.data() + t * num_kv_heads * head_size, num_kv_heads, head_size, cos,
                 sin, is_neox);
  }
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("llm/rotary_embedding", rotary_embedding);

}  // namespace crucible::tasks
