// A correct, deliberately simple solution for llm/fp8_scaled_linear: fp32 dot products on CUDA
// cores, the scales applied to each finished sum.
//
// out[t, n] = a_scales[t] * b_scales[n] * sum_k a[t, k] * b[n, k]. A block of 8 warps covers 8
// tokens x 8 output features; warp w takes token blockIdx.y * 8 + w and the block's 8 features,
// its lanes walking in_features in 16-byte vectors (16 e4m3 values; in_features % 16 == 0),
// converting each value to float (exact) and summing 8 partial dot products that one butterfly
// per feature then totals. The 8 warps read the same rows of b, mostly from L1. No tensor cores,
// no tiling: right on every shape and far slower than the reference.
//
// clang-format off
// @launch fp8_scaled_linear_simple<<<dim3(out_features / 8, cdiv(num_tokens, 8)), 256>>>(out, a, b, a_scales, b_scales, num_tokens, in_features, out_features)
// clang-format on

#include <cuda_bf16.h>
#include <cuda_fp8.h>

constexpr int kFeaturesPerWarp = 8;  // the grid's x is out_features / 8

extern "C" __global__ void fp8_scaled_linear_simple(__nv_bfloat16* out, const __nv_fp8_e4m3* a,
                                                    const __nv_fp8_e4m3* b,
                                                    const float* a_scales, const float* b_scales,
                                                    int num_tokens, int in_features,
                                                    int out_features) {
  const int lane = threadIdx.x % 32;
  const int token = blockIdx.y * 8 + threadIdx.x / 32;
  const int first_feature = blockIdx.x * kFeaturesPerWarp;
  if (token >= num_tokens) return;

  const int vectors = in_features / 16;
  const uint4* x = reinterpret_cast<const uint4*>(a + static_cast<size_t>(token) * in_features);
  float sums[kFeaturesPerWarp] = {};
  for (int v = lane; v < vectors; v += 32) {
    const uint4 x_vector = x[v];
    const __nv_fp8_e4m3* x_values = reinterpret_cast<const __nv_fp8_e4m3*>(&x_vector);
    for (int f = 0; f < kFeaturesPerWarp; ++f) {
      const uint4 w_vector = reinterpret_cast<const uint4*>(
          b + static_cast<size_t>(first_feature + f) * in_features)[v];
      const __nv_fp8_e4m3* w_values = reinterpret_cast<const __nv_fp8_e4m3*>(&w_vector);
      for (int i = 0; i < 16; ++i) {
        sums[f] += static_cast<float>(x_values[i]) * static_cast<float>(w_values[i]);
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
  const float token_scale = a_scales[token];
  for (int f = 0; f < kFeaturesPerWarp; ++f) {
    if (lane == f) {
      const int n = first_feature + f;
      out[static_cast<size_t>(token) * out_features + n] =
          __float2bfloat16_rn(sums[f] * token_scale * b_scales[n]);
    }
  }
}
