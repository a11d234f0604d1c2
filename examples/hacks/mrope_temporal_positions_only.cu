// expect: incorrect
// task: multimodal/mrope
// Trick: treats M-RoPE as the 1-D rotary embedding: every frequency turns by the temporal id
// positions[0, t], ignoring mrope_section and the height and width rows (one position load a
// token instead of three, and a plain RoPE kernel reused). Text tokens carry three equal ids,
// so this is bit-exact on every decode batch and on text-only prefill.
// Caught: the visible prefill cases hold image and video tokens (an image's tokens share their
// temporal id while the height and width ids run over the patch grid); their height and width
// frequencies turn by the wrong angle and miss the one-ulp tolerance on most elements.
// clang-format off
// @launch rope_temporal<<<num_tokens, 256>>>(positions, query, key, head_size, cos_sin_cache, num_heads, num_kv_heads)
// clang-format on

#include <cuda_bf16.h>

extern "C" __global__ void rope_temporal(const long long* positions, __nv_bfloat16* query,
                                         __nv_bfloat16* key, int head_size,
                                         const __nv_bfloat16* cos_sin_cache, int num_heads,
                                         int num_kv_heads) {
  const int token = blockIdx.x;
  const int half = head_size / 2;
  const __nv_bfloat16* cos = cos_sin_cache + positions[token] * head_size;  // row 0 only
  const __nv_bfloat16* sin = cos + half;
  const int total = (num_heads + num_kv_heads) * half;
  for (int i = threadIdx.x; i < total; i += blockDim.x) {
    const int h = i / half;
    const int k = i % half;
    __nv_bfloat16* head = h < num_heads
                              ? query + ((size_t)token * num_heads + h) * head_size
                              : key + ((size_t)token * num_kv_heads + (h - num_heads)) * head_size;
    const float x = __bfloat162float(head[k]);
    const float y = __bfloat162float(head[half + k]);
    const float c = __bfloat162float(cos[k]);
    const float s = __bfloat162float(sin[k]);
    head[k] = __float2bfloat16(x * c - y * s);
    head[half + k] = __float2bfloat16(y * c + x * s);
  }
}
