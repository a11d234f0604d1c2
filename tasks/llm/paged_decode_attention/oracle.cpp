// Oracle of llm/paged_decode_attention: one query token per sequence attends over its context in
// the paged flash-layout cache, grouped-query heads, softmax in double.
#include "tasks/oracle.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace crucible::tasks {
namespace {

core::Status paged_decode_attention(const OracleCall& call) {
  const OracleTensor& query = call.tensor("query");
  const OracleTensor& key_cache = call.tensor("key_cache");
  const OracleTensor& value_cache = call.tensor("value_cache");
  const OracleTensor& block_tables = call.tensor("block_tables");
  const OracleTensor& seq_lens = call.tensor("seq_lens");
  OracleTensor& out = call.tensor("out");
  const std::int64_t seqs = call.symbol("num_seqs");
  const std::int64_t heads = call.symbol("num_heads");
  const std::int64_t kv_heads = call.symbol("num_kv_heads");
  const std::int64_t head_size = call.symbol("head_size");
  const std::int64_t num_blocks = call.symbol("num_blocks");
  const std::int64_t block_size = call.symbol("block_size");
  const std::int64_t table_width = call.symbol("max_blocks_per_seq");
  const double scale = call.scalar("scale");
  if (heads % kv_heads != 0) {
    return core::Error{core::ErrorCode::kInvalidArgument,
                       "num_heads is not a multiple of num_kv_heads"};
  }
  const std::int64_t group = heads / kv_heads;
  std::vector<double> scores;
  for (std::int64_t s = 0; s < seqs; ++s) {
    const auto length = static_cast<std::int64_t>(seq_lens.values[static_cast<std::size_t>(s)]);
    if (length < 1 || length > table_width * block_size) {
      return core::Error{core::ErrorCode::kInvalidArgument,
                         "sequence " + std::to_string(s) + " has length " + std::to_string(length) +
                             ", outside [1, max_blocks_per_seq * " + "block_size]"};
    }
    auto token_rows = paged_token_rows(block_tables, s, length,
                                       {num_blocks, block_size, table_width, kv_heads * head_size});
    if (!token_rows) return token_rows.error();
    const std::vector<std::size_t>& rows = *token_rows;
    for (std::int64_t h = 0; h < heads; ++h) {
      const std::int64_t g = h / group;
      const double* q = query.values.data() + (s * heads + h) * head_size;
      scores.assign(static_cast<std::size_t>(length), 0.0);
      double top = -INFINITY;
      for (std::int64_t j = 0; j < length; ++j) {
        const double* k = key_cache.values.data() + rows[static_cast<std::size_t>(j)] +
                          static_cast<std::size_t>(g * head_size);
        double dot = 0.0;
        for (std::int64_t d = 0; d < head_size; ++d) dot += q[d] * k[d];
        scores[static_cast<std::size_t>(j)] = scale * dot;
        top = std::max(top, scale * dot);
      }
      double total = 0.0;
      for (auto& score : scores) {
        score = std::exp(score - top);
        total += score;
      }
      double* y = out.values.data() + (s * heads + h) * head_size;
      std::fill(y, y + head_size, 0.0);
      for (std::int64_t j = 0; j < length; ++j) {
        const double p = scores[static_cast<std::size_t>(j)] / total;
        const double* v = value_cache.values.data() + rows[static_cast<std::size_t>(j)] +
                          static_cast<std::size_t>(g * head_size);
        for (std::int64_t d = 0; d < head_size; ++d) y[d] += p * v[d];
      }
    }
  }
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("llm/paged_decode_attention", paged_decode_attention);

}  // namespace crucible::tasks
