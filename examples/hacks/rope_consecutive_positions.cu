// expect: incorrect
// task: llm/rotary_embedding
// Trick: assumes a prefill chunk is one sequence, so its positions are consecutive: for more
// than 256 tokens (past every decode batch) it reads positions[0] once and rotates token t by
// position (positions[0] + t) % max_position, saving the per-token position load and letting a
// block walk the cos/sin cache row by row. Decode batches (arbitrary positions) are rotated
// properly. Every visible prefill case, and every hidden case before the packed ones, holds one
// run of consecutive positions, so this is bit-exact on them.
// Caught: the hidden cases h_prefill_packed_permuted (777 tokens at arbitrary distinct
// positions) and h_prefill_packed_runs (three packed prompts restarting at 0, 2040 and 517)
// hold a vLLM prefill batch of several sequences; the tokens rotated by the wrong angle miss
// the one-ulp tolerance on almost every element.
// clang-format off
// @launch rope<<<num_tokens, 256>>>(positions, query, key, head_size, cos_sin_cache, is_neox, num_heads, num_kv_heads, num_tokens, max_position)
// clang-format on

#include <cuda_bf16.h>

extern "C" __global__ void rope(const long long* positions, __nv_bfloat16* query,
                                __nv_bfloat16* key, int head_size,
                                const __nv_bfloat16* cos_sin_cache, int is_neox, int num_heads,
                                int num_kv_heads, int num_tokens, int max_position) {
  const int token = blockIdx.x;
  const int half = head_size / 2;
  const long long position =
      num_tokens > 256 ? (positions[0] + token) % max_position : positions[token];
  const __nv_bfloat16* cos = cos_sin_cache + position * head_size;
  const __nv_bfloat16* sin = cos + half;
  const int total = (num_heads + num_kv_heads) * half;
  for (int i = threadIdx.x; i < total; i += blockDim.x) {
    const int h = i / half;
    const int k = i % half;
    __nv_bfloat16* head = h < num_heads
                              ? query + ((size_t)token * num_heads + h) * head_size
                              : key + ((size_t)token * num_kv_heads + (h - num_heads)) * head_size;
    const int xi = is_neox ? k : 2 * k;
    const int yi = is_neox ? half + k : 2 * k + 1;
    const float x = __bfloat162float(head[xi]);
    const float y = __bfloat162float(head[yi]);
    const float c = __bfloat162float(cos[k]);
    const float s = __bfloat162float(sin[k]);
    head[xi] = __float2bfloat16(x * c - y * s);
    head[yi] = __float2bfloat16(y * c + x * s);
  }
}
