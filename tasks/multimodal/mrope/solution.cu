// A correct, deliberately simple solution for multimodal/mrope: one block per token, one rotation
// pair per thread and step, the pair's section picking which of the token's three positions it
// rotates by, 2-byte loads and stores.
//
// Slower than the reference (scalar accesses, each cos/sin value re-read per head, a block per
// token however few heads it has), but right on every shape and every section split.
//
// clang-format off
// @launch mrope_simple<<<num_tokens, 256>>>(positions, query, key, head_size, cos_sin_cache, mrope_section_t, mrope_section_h, num_tokens, num_heads, num_kv_heads)
// clang-format on

#include <cuda_bf16.h>

extern "C" __global__ void mrope_simple(const long long* positions, __nv_bfloat16* query,
                                        __nv_bfloat16* key, int head_size,
                                        const __nv_bfloat16* cos_sin_cache, int mrope_section_t,
                                        int mrope_section_h, int num_tokens, int num_heads,
                                        int num_kv_heads) {
  const int token = blockIdx.x;
  const int half = head_size / 2;
  // Query heads, then key heads: (head, k) numbered h * half + k.
  const int total = (num_heads + num_kv_heads) * half;
  for (int i = threadIdx.x; i < total; i += blockDim.x) {
    const int h = i / half;
    const int k = i % half;
    // Frequencies [0, t) use the temporal position, [t, t + h) the height, the rest the width.
    const int row = k < mrope_section_t ? 0 : (k < mrope_section_t + mrope_section_h ? 1 : 2);
    const long long p = positions[(size_t)row * num_tokens + token];
    const __nv_bfloat16* cache_row = cos_sin_cache + p * head_size;
    __nv_bfloat16* head = h < num_heads
                              ? query + ((size_t)token * num_heads + h) * head_size
                              : key + ((size_t)token * num_kv_heads + (h - num_heads)) * head_size;
    const float x = __bfloat162float(head[k]);
    const float y = __bfloat162float(head[half + k]);
    const float c = __bfloat162float(cache_row[k]);
    const float s = __bfloat162float(cache_row[half + k]);
    head[k] = __float2bfloat16(x * c - y * s);
    head[half + k] = __float2bfloat16(y * c + x * s);
  }
}
