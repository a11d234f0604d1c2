// A correct, deliberately simple solution for llm/rotary_embedding: one block per token, one
// rotation pair per thread and step, 2-byte loads and stores.
//
// Slower than the reference (scalar accesses, each cos/sin value re-read per head, a block per
// token however few heads it has), but right on every shape and both styles.
//
// clang-format off
// @launch rotary_embedding_simple<<<num_tokens, 256>>>(positions, query, key, head_size, cos_sin_cache, is_neox, num_heads, num_kv_heads)
// clang-format on

#include <cuda_bf16.h>

extern "C" __global__ void rotary_embedding_simple(const long long* positions, __nv_bfloat16* query,
                                                   __nv_bfloat16* key, int head_size,
                                                   const __nv_bfloat16* cos_sin_cache, int is_neox,
                                                   int num_heads, int num_kv_heads) {
  const int token = blockIdx.x;
  const int half = head_size / 2;
  const __nv_bfloat16* cos = cos_sin_cache + positions[token] * head_size;
  const __nv_bfloat16* sin = cos + half;
  // Query heads, then key heads: (head, k) numbered h * half + k.
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
