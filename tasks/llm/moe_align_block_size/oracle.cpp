// Oracle of llm/moe_align_block_size: the padded per-expert layout of the flat indices of
// topk_ids, each segment in ascending index order followed by its padding (the task's checker
// accepts any order inside a segment; this is the order vLLM's one-block kernel produces).
#include "tasks/oracle.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace crucible::tasks {
namespace {

core::Status moe_align_block_size(const OracleCall& call) {
  const OracleTensor& ids = call.tensor("topk_ids");
  OracleTensor& sorted = call.tensor("sorted_token_ids");
  OracleTensor& blocks = call.tensor("experts_ids");
  OracleTensor& post_pad = call.tensor("num_tokens_post_pad");
  const auto experts = static_cast<std::int64_t>(call.scalar("num_experts"));
  const auto block_size = static_cast<std::int64_t>(call.scalar("block_size"));
  const auto numel = static_cast<std::int64_t>(ids.size());
  const std::int64_t max_padded = call.symbol("max_num_tokens_padded");
  const std::int64_t max_blocks = call.symbol("max_num_m_blocks");
  if (experts < 1 || block_size < 1) {
    return core::Error{core::ErrorCode::kInvalidArgument,
                       "moe_align_block_size: num_experts and block_size must be positive"};
  }
  if (max_blocks != (max_padded + block_size - 1) / block_size) {
    return core::Error{core::ErrorCode::kInvalidArgument,
                       "moe_align_block_size: max_num_m_blocks must be "
                       "ceil(max_num_tokens_padded / block_size)"};
  }
  std::vector<std::vector<std::int64_t>> members(static_cast<std::size_t>(experts));
  for (std::int64_t i = 0; i < numel; ++i) {
    const double id = ids.values[i];
    if (id >= 0.0 && id < static_cast<double>(experts)) {
      members[static_cast<std::size_t>(id)].push_back(i);  // ascending i
    }
  }
  std::int64_t total = 0;
  std::int64_t position = 0;
  for (std::int64_t e = 0; e < experts; ++e) {
    const auto count = static_cast<std::int64_t>(members[e].size());
    const std::int64_t padded = (count + block_size - 1) / block_size * block_size;
    if (total + padded > max_padded) {
      return core::Error{core::ErrorCode::kInvalidArgument,
                         "moe_align_block_size: the padded layout needs more than "
                         "max_num_tokens_padded = " +
                             std::to_string(max_padded) + " positions"};
    }
    for (std::int64_t j = 0; j < padded; ++j) {
      sorted.values[position++] =
          j < count ? static_cast<double>(members[e][j]) : static_cast<double>(numel);
    }
    for (std::int64_t b = total / block_size; b < (total + padded) / block_size; ++b) {
      blocks.values[b] = static_cast<double>(e);
    }
    total += padded;
  }
  for (; position < max_padded; ++position) sorted.values[position] = static_cast<double>(numel);
  for (std::int64_t b = total / block_size; b < max_blocks; ++b) blocks.values[b] = 0.0;
  post_pad.values[0] = static_cast<double>(total);
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("llm/moe_align_block_size", moe_align_block_size);

}  // namespace crucible::tasks
