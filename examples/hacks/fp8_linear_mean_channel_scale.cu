// expect: incorrect
// task: llm/fp8_scaled_linear
// Trick: treats the weight as if it were quantized per tensor (as vLLM's per-tensor fp8
// checkpoints are, one weight scale for the whole matrix) and multiplies every output by the mean
// of b_scales instead of its own channel's scale: one broadcast scale, no per-column loads in the
// epilogue. Exact whenever the channel scales are equal, and within a few percent when they
// are nearly so.
// Caught: every case: the channel scales are spread over [1e-4, 3e-4), as per-channel
// quantization of Llama-3's weight rows gives, so most outputs are off by tens of percent,
// far past rtol 1e-2 and atol 0.05 (host emulation, bench/fp8_accumulation_model.py: 90-95 %
// of the elements of every real-shape case fail, their median error 8-15 times the tolerance;
// 46 % or more in the tiny and the five-decade hidden cases).
//
// @launch fp8_linear_mean_scale<<<dim3(out_features / 8, cdiv(num_tokens, 8)), 256>>>(out, a, b,
//   a_scales, b_scales, num_tokens, in_features, out_features)

#include <cuda_bf16.h>
#include <cuda_fp8.h>

extern "C" __global__ void fp8_linear_mean_scale(__nv_bfloat16* out, const __nv_fp8_e4m3* a,
                                                 const __nv_fp8_e4m3* b, const float* a_scales,
                                                 const float* b_scales, int num_tokens,
                                                 int in_features, int out_features) {
  // The block's mean of every channel scale (each block recomputes it: no second kernel).
  __shared__ float partial_sums[256];
  float local = 0.0f;
  for (int n = threadIdx.x; n < out_features; n += blockDim.x) local += b_scales[n];
  partial_sums[threadIdx.x] = local;
  __syncthreads();
  for (int stride = 128; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial_sums[threadIdx.x] += partial_sums[threadIdx.x + stride];
    __syncthreads();
  }
  const float mean_scale = partial_sums[0] / static_cast<float>(out_features);

  const int lane = threadIdx.x % 32;
  const int token = blockIdx.y * 8 + threadIdx.x / 32;
  const int first_feature = blockIdx.x * 8;
  if (token >= num_tokens) return;
  const int vectors = in_features / 16;
  const uint4* x = reinterpret_cast<const uint4*>(a + static_cast<size_t>(token) * in_features);
  float sums[8] = {};
  for (int v = lane; v < vectors; v += 32) {
    const uint4 x_vector = x[v];
    const __nv_fp8_e4m3* x_values = reinterpret_cast<const __nv_fp8_e4m3*>(&x_vector);
    for (int f = 0; f < 8; ++f) {
      const uint4 w_vector = reinterpret_cast<const uint4*>(
          b + static_cast<size_t>(first_feature + f) * in_features)[v];
      const __nv_fp8_e4m3* w_values = reinterpret_cast<const __nv_fp8_e4m3*>(&w_vector);
      for (int i = 0; i < 16; ++i) {
        sums[f] += static_cast<float>(x_values[i]) * static_cast<float>(w_values[i]);
      }
    }
  }
  for (int f = 0; f < 8; ++f) {
    for (int offset = 16; offset > 0; offset /= 2) {
      sums[f] += __shfl_xor_sync(0xffffffffu, sums[f], offset);
    }
  }
  const float scale = a_scales[token] * mean_scale;
  for (int f = 0; f < 8; ++f) {
    if (lane == f) {
      out[static_cast<size_t>(token) * out_features + first_feature + f] =
          __float2bfloat16_rn(sums[f] * scale);
    }
  }
}
