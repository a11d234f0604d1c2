// A correct, deliberately simple solution for llm/reshape_and_cache_flash: one block per token
// copying its key and value rows element by element through the paged coordinates.
//
// Slower than the reference (2-byte accesses, a block per token however short its row), but
// right on every shape, padding included.
//
// clang-format off
// @launch reshape_and_cache_flash_simple<<<num_tokens, 256>>>(key, value, key_cache, value_cache, slot_mapping, num_kv_heads, head_size, block_size)
// clang-format on

#include <cuda_bf16.h>

extern "C" __global__ void reshape_and_cache_flash_simple(
    const __nv_bfloat16* key, const __nv_bfloat16* value, __nv_bfloat16* key_cache,
    __nv_bfloat16* value_cache, const long long* slot_mapping, int num_kv_heads, int head_size,
    int block_size) {
  const int token = blockIdx.x;
  const long long slot = slot_mapping[token];
  if (slot < 0) return;  // a padding token: nothing to write
  const long long block = slot / block_size;
  const long long offset = slot % block_size;
  const int row = num_kv_heads * head_size;
  // key_cache[block, offset, :, :] is row (block * block_size + offset) of the cache.
  const long long target = (block * block_size + offset) * row;
  const long long source = (long long)token * row;
  for (int i = threadIdx.x; i < row; i += blockDim.x) {
    key_cache[target + i] = key[source + i];
    value_cache[target + i] = value[source + i];
  }
}
