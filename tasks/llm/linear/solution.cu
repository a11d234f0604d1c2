// A correct, deliberately simple solution for llm/linear: fp32 dot products on CUDA cores.
//
// out[t, n] = sum_k input[t, k] * weight[n, k]. A block of 8 warps covers 8 tokens x 8 output
// features; warp w takes token blockIdx.y * 8 + w and the block's 8 features, its lanes walking
// in_features in 16-byte vectors (in_features % 8 == 0) and summing 8 partial dot products that
// one butterfly per feature then totals. The 8 warps read the same weight rows, mostly from L1.
// No tensor cores, no tiling: right on every shape and far slower than the reference.
//
// clang-format off
// @launch linear_simple<<<dim3(out_features / 8, cdiv(num_tokens, 8)), 256>>>(out, input, weight, num_tokens, in_features, out_features)
// clang-format on

#include <cuda_bf16.h>

constexpr int kFeaturesPerWarp = 8;  // the grid's x is out_features / 8

extern "C" __global__ void linear_simple(__nv_bfloat16* out, const __nv_bfloat16* input,
                                         const __nv_bfloat16* weight, int num_tokens,
                                         int in_features, int out_features) {
  const int lane = threadIdx.x % 32;
  const int token = blockIdx.y * 8 + threadIdx.x / 32;
  const int first_feature = blockIdx.x * kFeaturesPerWarp;
  if (token >= num_tokens) return;

  const int vectors = in_features / 8;
  const uint4* x = reinterpret_cast<const uint4*>(input + static_cast<size_t>(token) * in_features);
  float sums[kFeaturesPerWarp] = {};
  for (int v = lane; v < vectors; v += 32) {
    const uint4 x_vector = x[v];
    const __nv_bfloat162* x_pairs = reinterpret_cast<const __nv_bfloat162*>(&x_vector);
    for (int f = 0; f < kFeaturesPerWarp; ++f) {
      const uint4 w_vector = reinterpret_cast<const uint4*>(
          weight + static_cast<size_t>(first_feature + f) * in_features)[v];
      const __nv_bfloat162* w_pairs = reinterpret_cast<const __nv_bfloat162*>(&w_vector);
      for (int p = 0; p < 4; ++p) {
        const float2 xv = __bfloat1622float2(x_pairs[p]);
        const float2 wv = __bfloat1622float2(w_pairs[p]);
        sums[f] += xv.x * wv.x + xv.y * wv.y;
      }
    }
  }
  for (int f = 0; f < kFeaturesPerWarp; ++f) {
    for (int offset = 16; offset > 0; offset /= 2) {
      sums[f] += __shfl_xor_sync(0xffffffffu, sums[f], offset);
    }
  }
  // Every lane now holds all 8 totals; lane f writes feature f (a constant index per f keeps
  // sums in registers).
  for (int f = 0; f < kFeaturesPerWarp; ++f) {
    if (lane == f) {
      out[static_cast<size_t>(token) * out_features + first_feature + f] =
          __float2bfloat16_rn(sums[f]);
    }
  }
}
