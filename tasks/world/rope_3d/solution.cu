// A correct, deliberately simple solution for world/rope_3d: one thread per query or key
// element, its angle computed on the spot.
//
// Slower than the reference (2-byte loads, a pow and a sincos per element, every element's
// partner read again), but right on every shape.
//
// clang-format off
// @launch rope_3d_simple<<<cdiv(batch * num_tokens * 2 * num_heads * head_dim, 256), 256>>>(qkv, token_ids, batch, num_tokens, num_heads, head_dim, grid_h, grid_w)
// clang-format on

#include <cuda_bf16.h>

extern "C" __global__ void rope_3d_simple(__nv_bfloat16* qkv, const long long* token_ids, int batch,
                                          int num_tokens, int num_heads, int head_dim, int grid_h,
                                          int grid_w) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const long long per_token = 2LL * num_heads * head_dim;
  if (i >= static_cast<long long>(batch) * num_tokens * per_token) return;
  // Pairs are handled by their even element, which writes both (no read-after-write race).
  if (i % 2 != 0) return;
  const long long token = i / per_token;
  const long long e = i % per_token;  // in the token's query heads followed by key heads
  const int c = static_cast<int>(e % head_dim);
  const int s = 2 * ((head_dim / 3) / 2);
  if (c >= 3 * s) return;
  const int half = s / 2;
  const long long n = token_ids[token];
  const long long plane = static_cast<long long>(grid_h) * grid_w;
  __nv_bfloat16* x = qkv + token * 3LL * num_heads * head_dim + e;
  const float x0 = __bfloat162float(x[0]);
  const float x1 = __bfloat162float(x[1]);
  float out[2];
  for (int k = 0; k < 2; ++k) {
    const int cc = c + k;
    const int axis = cc / s;
    const int j = (cc - axis * s) % half;
    const long long p = axis == 0 ? n / plane : axis == 1 ? (n % plane) / grid_w : n % grid_w;
    const float theta = static_cast<float>(p * pow(10000.0, -static_cast<double>(j) / half));
    const float partner = k == 0 ? -x1 : x0;
    out[k] = (k == 0 ? x0 : x1) * cosf(theta) + partner * sinf(theta);
  }
  x[0] = __float2bfloat16(out[0]);
  x[1] = __float2bfloat16(out[1]);
}
