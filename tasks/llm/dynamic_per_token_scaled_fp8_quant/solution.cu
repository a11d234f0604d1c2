// A correct, deliberately simple solution for llm/dynamic_per_token_scaled_fp8_quant: one
// block per token, scalar loads, a shared-memory tree max, the row read twice.
//
// Slower than the reference (2-byte loads, 1-byte stores, a barrier per reduction step, a
// second read of the row), but right on every shape.
//
// clang-format off
// @launch fp8_quant_simple<<<num_tokens, 256>>>(out, input, scale, hidden_size)
// clang-format on

#include <cuda_bf16.h>
#include <cuda_fp8.h>

constexpr int kThreads = 256;  // must equal the block size in the directive

extern "C" __global__ void fp8_quant_simple(__nv_fp8_e4m3* out, const __nv_bfloat16* input,
                                            float* scale, int hidden_size) {
  __shared__ float partial[kThreads];
  const __nv_bfloat16* x = input + static_cast<size_t>(blockIdx.x) * hidden_size;
  __nv_fp8_e4m3* y = out + static_cast<size_t>(blockIdx.x) * hidden_size;

  float amax = 0.0f;
  for (int i = threadIdx.x; i < hidden_size; i += kThreads) {
    amax = fmaxf(amax, fabsf(__bfloat162float(x[i])));
  }
  partial[threadIdx.x] = amax;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half)
      partial[threadIdx.x] = fmaxf(partial[threadIdx.x], partial[threadIdx.x + half]);
    __syncthreads();
  }
  // vLLM's floor keeps an all-zero row from a zero scale.
  const float token_scale = fmaxf(partial[0] / 448.0f, 1.0f / (448.0f * 512.0f));
  if (threadIdx.x == 0) scale[blockIdx.x] = token_scale;

  for (int i = threadIdx.x; i < hidden_size; i += kThreads) {
    const float q = fminf(fmaxf(__bfloat162float(x[i]) / token_scale, -448.0f), 448.0f);
    y[i] = __nv_fp8_e4m3(q);  // round to nearest even, saturating
  }
}
