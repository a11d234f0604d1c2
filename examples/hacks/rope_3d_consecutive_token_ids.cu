// expect: incorrect
// task: world/rope_3d
// Trick: takes a clip to be unmasked, a rotation of its full patch grid, so token t's id is
// (token_ids[clip, 0] + t) mod num_tokens: it reads one id per clip instead of one per token
// and can step the (frame, row, column) position of consecutive tokens like an odometer. Every
// visible clip (the positions generator: a seeded start, then consecutive ids wrapping at the
// grid size, which equals num_tokens) and the hidden wide-grid clip are such rotations, so the
// positions, and the result, are exactly those read from token_ids.
// Caught: the hidden cases of masked clips, whose ids are drawn at random over the grid:
// h_masked_context (3 clips of 205 tokens out of 16 x 16 x 16), h_vith_odd_tokens,
// h_small_heads and h_head_dim_66. Nearly every token gets another frame, row and column, so
// its query and key are rotated by wrong angles (errors of the order of the values, about 1,
// against a tolerance of 1e-3 + 7.8e-3 |x|).
// clang-format off
// @launch rope_3d_consecutive<<<cdiv(batch * num_tokens * 2 * num_heads * head_dim, 256), 256>>>(qkv, token_ids, batch, num_tokens, num_heads, head_dim, grid_h, grid_w)
// clang-format on

#include <cuda_bf16.h>

extern "C" __global__ void rope_3d_consecutive(__nv_bfloat16* qkv, const long long* token_ids,
                                               int batch, int num_tokens, int num_heads,
                                               int head_dim, int grid_h, int grid_w) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const long long per_token = 2LL * num_heads * head_dim;
  if (i >= static_cast<long long>(batch) * num_tokens * per_token) return;
  if (i % 2 != 0) return;  // a pair is handled by its even element
  const long long token = i / per_token;
  const long long clip = token / num_tokens;
  const long long t = token % num_tokens;
  const long long e = i % per_token;
  const int c = static_cast<int>(e % head_dim);
  const int s = 2 * ((head_dim / 3) / 2);
  if (c >= 3 * s) return;
  const int half = s / 2;
  const long long n = (token_ids[clip * num_tokens] + t) % num_tokens;  // assumed consecutive
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
