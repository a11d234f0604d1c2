// Oracle of llm/reshape_and_cache_flash: each token's key and value rows copied exactly to
// [slot / block_size, slot % block_size] of the caches; padding tokens (slot < 0) write nothing.
#include "tasks/oracle.hpp"

#include <algorithm>
#include <string>

namespace crucible::tasks {
namespace {

core::Status reshape_and_cache_flash(const OracleCall& call) {
  const OracleTensor& key = call.tensor("key");
  const OracleTensor& value = call.tensor("value");
  const OracleTensor& slot_mapping = call.tensor("slot_mapping");
  OracleTensor& key_cache = call.tensor("key_cache");
  OracleTensor& value_cache = call.tensor("value_cache");
  const std::int64_t tokens = call.symbol("num_tokens");
  const std::int64_t row = call.symbol("num_kv_heads") * call.symbol("head_size");
  const std::int64_t num_blocks = call.symbol("num_blocks");
  const std::int64_t block_size = call.symbol("block_size");
  for (std::int64_t t = 0; t < tokens; ++t) {
    const double slot_value = slot_mapping.values[t];
    if (slot_value < 0.0) continue;  // padding token
    const auto slot = static_cast<std::int64_t>(slot_value);
    if (slot >= num_blocks * block_size) {
      return core::Error{core::ErrorCode::kInvalidArgument,
                         "slot_mapping[" + std::to_string(t) + "] = " + std::to_string(slot) +
                             " is outside the cache of " + std::to_string(num_blocks * block_size) +
                             " slots"};
    }
    // Written through the paged coordinates, as the op defines it; in the flash layout
    // (block * block_size + offset) * row is slot * row.
    const std::int64_t block = slot / block_size;
    const std::int64_t offset = slot % block_size;
    const std::int64_t target = (block * block_size + offset) * row;
    std::copy_n(key.values.begin() + t * row, row, key_cache.values.begin() + target);
    std::copy_n(value.values.begin() + t * row, row, value_cache.values.begin() + target);
  }
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("llm/reshape_and_cache_flash", reshape_and_cache_flash);

}  // namespace crucible::tasks
