// Oracle of llm/flash_attn_varlen_prefill: packed variable-length query chunks attend causally
// (bottom-right aligned) over their contexts in the paged flash-layout cache, grouped-query
// heads, softmax in double. Work is shared out among threads by (sequence, head, block of query
// rows): the GPU suite checks cases of up to 10^12 multiply-adds.
#include "tasks/oracle.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

namespace crucible::tasks {
namespace {

constexpr std::int64_t kRowsPerUnit = 64;  // query rows per unit of work

core::Error invalid(const std::string& message) {
  return core::Error{core::ErrorCode::kInvalidArgument, message};
}

core::Status flash_attn_varlen_prefill(const OracleCall& call) {
  const OracleTensor& query = call.tensor("query");
  const OracleTensor& key_cache = call.tensor("key_cache");
  const OracleTensor& value_cache = call.tensor("value_cache");
  const OracleTensor& block_tables = call.tensor("block_tables");
  const OracleTensor& cu_seqlens_q = call.tensor("cu_seqlens_q");
  const OracleTensor& seq_lens = call.tensor("seq_lens");
  OracleTensor& out = call.tensor("out");
  const std::int64_t tokens = call.symbol("num_tokens");
  const std::int64_t seqs = call.symbol("num_seqs");
  const std::int64_t heads = call.symbol("num_heads");
  const std::int64_t kv_heads = call.symbol("num_kv_heads");
  const std::int64_t head_size = call.symbol("head_size");
  const std::int64_t num_blocks = call.symbol("num_blocks");
  const std::int64_t block_size = call.symbol("block_size");
  const std::int64_t table_width = call.symbol("max_blocks_per_seq");
  const double scale = call.scalar("scale");

  // The shapes the tensors must have for the reads below to stay inside them.
  if (heads % kv_heads != 0) return invalid("num_heads is not a multiple of num_kv_heads");
  const auto rows_size = static_cast<std::size_t>(tokens * heads * head_size);
  const auto cache_size = static_cast<std::size_t>(num_blocks * block_size * kv_heads * head_size);
  if (query.size() != rows_size || out.size() != rows_size || key_cache.size() != cache_size ||
      value_cache.size() != cache_size ||
      block_tables.size() != static_cast<std::size_t>(seqs * table_width) ||
      cu_seqlens_q.size() != static_cast<std::size_t>(seqs + 1) ||
      seq_lens.size() != static_cast<std::size_t>(seqs)) {
    return invalid("tensor sizes do not match the symbols");
  }
  if (cu_seqlens_q.values.front() != 0) return invalid("cu_seqlens_q does not start at 0");
  if (cu_seqlens_q.values.back() != static_cast<double>(tokens)) {
    return invalid("cu_seqlens_q does not end at num_tokens");
  }
  // Element offset of every context token's row (all kv heads) in the caches, per sequence.
  std::vector<std::vector<std::size_t>> rows(static_cast<std::size_t>(seqs));
  for (std::int64_t s = 0; s < seqs; ++s) {
    const auto first = static_cast<std::int64_t>(cu_seqlens_q.values[static_cast<std::size_t>(s)]);
    const auto last =
        static_cast<std::int64_t>(cu_seqlens_q.values[static_cast<std::size_t>(s + 1)]);
    const auto length = static_cast<std::int64_t>(seq_lens.values[static_cast<std::size_t>(s)]);
    const std::string which = "sequence " + std::to_string(s);
    if (last < first) return invalid("cu_seqlens_q decreases at " + which);
    if (length < last - first) {
      return invalid(which + " has " + std::to_string(last - first) + " query tokens but a " +
                     "context of " + std::to_string(length));
    }
    if (length > table_width * block_size) {
      return invalid(which + " has length " + std::to_string(length) +
                     ", more than max_blocks_per_seq * block_size");
    }
    auto seq_rows = paged_token_rows(block_tables, s, length,
                                     {num_blocks, block_size, table_width, kv_heads * head_size});
    if (!seq_rows) return seq_rows.error();
    rows[static_cast<std::size_t>(s)] = std::move(*seq_rows);
  }

  // Units of work: (sequence, head, kRowsPerUnit query rows of the sequence).
  struct Unit {
    std::int64_t seq, head, first_row;
  };
  std::vector<Unit> units;
  double multiply_adds = 0.0;
  for (std::int64_t s = 0; s < seqs; ++s) {
    const auto q_rows =
        static_cast<std::int64_t>(cu_seqlens_q.values[static_cast<std::size_t>(s + 1)] -
                                  cu_seqlens_q.values[static_cast<std::size_t>(s)]);
    multiply_adds += static_cast<double>(q_rows) *
                     static_cast<double>(rows[static_cast<std::size_t>(s)].size()) *
                     static_cast<double>(heads * head_size);
    for (std::int64_t h = 0; h < heads; ++h) {
      for (std::int64_t i = 0; i < q_rows; i += kRowsPerUnit) units.push_back({s, h, i});
    }
  }

  const std::int64_t group = heads / kv_heads;
  auto run_unit = [&](const Unit& unit, std::vector<double>& scores) {
    const auto s = static_cast<std::size_t>(unit.seq);
    const std::vector<std::size_t>& seq_rows = rows[s];
    const auto length = static_cast<std::int64_t>(seq_rows.size());
    const auto first = static_cast<std::int64_t>(cu_seqlens_q.values[s]);
    const auto q_rows = static_cast<std::int64_t>(cu_seqlens_q.values[s + 1]) - first;
    const std::int64_t kv_offset = unit.head / group * head_size;
    for (std::int64_t i = unit.first_row; i < std::min(q_rows, unit.first_row + kRowsPerUnit);
         ++i) {
      const std::int64_t position = length - q_rows + i;  // sees keys 0 .. position
      const std::int64_t r = first + i;
      const double* q = query.values.data() + (r * heads + unit.head) * head_size;
      double top = -INFINITY;
      for (std::int64_t j = 0; j <= position; ++j) {
        const double* k = key_cache.values.data() + seq_rows[static_cast<std::size_t>(j)] +
                          static_cast<std::size_t>(kv_offset);
        double dot = 0.0;
        for (std::int64_t d = 0; d < head_size; ++d) dot += q[d] * k[d];
        scores[static_cast<std::size_t>(j)] = scale * dot;
        top = std::max(top, scale * dot);
      }
      double total = 0.0;
      double* y = out.values.data() + (r * heads + unit.head) * head_size;
      std::fill(y, y + head_size, 0.0);
      for (std::int64_t j = 0; j <= position; ++j) {
        const double p = std::exp(scores[static_cast<std::size_t>(j)] - top);
        total += p;
        const double* v = value_cache.values.data() + seq_rows[static_cast<std::size_t>(j)] +
                          static_cast<std::size_t>(kv_offset);
        for (std::int64_t d = 0; d < head_size; ++d) y[d] += p * v[d];
      }
      for (std::int64_t d = 0; d < head_size; ++d) y[d] /= total;
    }
  };

  std::size_t longest = 0;
  for (const auto& seq_rows : rows) longest = std::max(longest, seq_rows.size());
  // Small cases (the CPU suite's) stay on the calling thread.
  share_units(static_cast<std::int64_t>(units.size()),
              multiply_adds >= static_cast<double>(std::int64_t{1} << 22), [&] {
                return [&, scores = std::vector<double>(longest)](std::int64_t u) mutable {
                  run_unit(units[static_cast<std::size_t>(u)], scores);
                };
              });
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("llm/flash_attn_varlen_prefill", flash_attn_varlen_prefill);

}  // namespace crucible::tasks
