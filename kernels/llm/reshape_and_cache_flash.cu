// Reference for llm/reshape_and_cache_flash: vLLM's paged KV-cache write (flash layout), bf16.
//
// Device code only, compiled by NVRTC for sm_90a and launched as the directives below say (see
// kernels/llm/rms_norm.cu for the conventions). For every token t with slot = slot_mapping[t]:
//
//   slot < 0:  a padding token; nothing is written.
//   otherwise: key_cache[slot / block_size, slot % block_size, :, :] = key[t, :, :]
//              value_cache[slot / block_size, slot % block_size, :, :] = value[t, :, :]
//
// In the flash layout [num_blocks, block_size, num_kv_heads, head_size], block b, offset o
// starts at element (b * block_size + o) * num_kv_heads * head_size = slot * row, so the write
// is a copy of one row of row = num_kv_heads * head_size elements to row `slot` of the cache
// seen as [num_blocks * block_size, row]; block_size never enters the addressing.
//
// Launch plan: one thread per 16-byte vector of a token's row, copying that vector of both key
// and value. Rows that are not whole vectors (row % 8 != 0: rows past the first are not 16-byte
// aligned) take the element-per-thread kernel.
//
// clang-format off
// @launch if ((num_kv_heads * head_size) % 8 == 0) reshape_and_cache_flash_kernel<<<cdiv(num_tokens * (num_kv_heads * head_size / 8), 256), 256>>>(key, value, key_cache, value_cache, slot_mapping, num_tokens, num_kv_heads, head_size)
// @launch if ((num_kv_heads * head_size) % 8 != 0) reshape_and_cache_flash_elements_kernel<<<cdiv(num_tokens * num_kv_heads * head_size, 256), 256>>>(key, value, key_cache, value_cache, slot_mapping, num_tokens, num_kv_heads, head_size)
// clang-format on
//
// Design notes (why, for whoever optimises this next):
// - A pure copy: the floor is reading key and value once and writing them once. Each thread
//   moves 32 bytes with two 16-byte loads and two 16-byte stores; a warp moves 512 contiguous
//   bytes of a row, and a row (2 KiB for 8 heads of 128) lands contiguously in the cache.
// - The slot and the key/value vectors are loaded together, before the slot is tested: the data
//   loads do not wait a round trip on the slot. A padding token wastes its loads (a few
//   percent of rows in a CUDA-graph-padded decode batch), which costs less than the serialised
//   latency would on every real token.
// - vLLM's kernel gives each token a block and walks heads and elements with scalar (or, in
//   recent versions, per-head vector) copies; the flat grid here also fills the SMs when a
//   decode batch has only a few tokens: one Llama-3-8B token is 256 threads of work.
// - Vector indices are 32-bit (a tensor is at most 16 GiB, so key has fewer than 2^30 vectors);
//   cache offsets are 64-bit because slot * row can exceed 2^32. The element kernel, a
//   fallback, indexes in 64 bits throughout (2^33 elements fit in 16 GiB).

#include <cuda_bf16.h>

// key, value: [num_tokens, num_kv_heads, head_size]; key_cache, value_cache: [num_blocks,
// block_size, num_kv_heads, head_size]; slot_mapping: [num_tokens] int64, each slot in
// [0, num_blocks * block_size) or negative. num_kv_heads * head_size % 8 == 0.
extern "C" __global__ void __launch_bounds__(256) reshape_and_cache_flash_kernel(
    const __nv_bfloat16* __restrict__ key, const __nv_bfloat16* __restrict__ value,
    __nv_bfloat16* __restrict__ key_cache, __nv_bfloat16* __restrict__ value_cache,
    const long long* __restrict__ slot_mapping, int num_tokens, int num_kv_heads, int head_size) {
  const unsigned int vectors_per_row = static_cast<unsigned int>(num_kv_heads * head_size) / 8;
  const unsigned int index = blockIdx.x * blockDim.x + threadIdx.x;
  if (index >= static_cast<unsigned int>(num_tokens) * vectors_per_row) return;
  const unsigned int token = index / vectors_per_row;

  const long long slot = slot_mapping[token];
  const uint4 k = reinterpret_cast<const uint4*>(key)[index];
  const uint4 v = reinterpret_cast<const uint4*>(value)[index];
  if (slot < 0) return;

  const size_t target =
      static_cast<size_t>(slot) * vectors_per_row + (index - token * vectors_per_row);
  reinterpret_cast<uint4*>(key_cache)[target] = k;
  reinterpret_cast<uint4*>(value_cache)[target] = v;
}

// Any row width: one element of key and of value per thread. Same arguments.
extern "C" __global__ void __launch_bounds__(256) reshape_and_cache_flash_elements_kernel(
    const __nv_bfloat16* __restrict__ key, const __nv_bfloat16* __restrict__ value,
    __nv_bfloat16* __restrict__ key_cache, __nv_bfloat16* __restrict__ value_cache,
    const long long* __restrict__ slot_mapping, int num_tokens, int num_kv_heads, int head_size) {
  const unsigned long long row = static_cast<unsigned long long>(num_kv_heads * head_size);
  const unsigned long long index =
      static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= static_cast<unsigned long long>(num_tokens) * row) return;
  const unsigned long long token = index / row;

  const long long slot = slot_mapping[token];
  const __nv_bfloat16 k = key[index];
  const __nv_bfloat16 v = value[index];
  if (slot < 0) return;

  const unsigned long long target =
      static_cast<unsigned long long>(slot) * row + (index - token * row);
  key_cache[target] = k;
  value_cache[target] = v;
}
