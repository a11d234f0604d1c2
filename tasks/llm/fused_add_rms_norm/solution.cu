// A correct, deliberately simple solution for llm/fused_add_rms_norm: scalar loads, a
// shared-memory tree sum, the stored residual re-read for the scaling.
//
// Slower than the reference (2-byte loads, a barrier per reduction step, a second read of the
// row), but right on every shape.
//
// clang-format off
// @launch fused_add_rms_norm_simple<<<num_tokens, 256>>>(input, residual, weight, epsilon, hidden_size)
// clang-format on

#include <cuda_bf16.h>

constexpr int kThreads = 256;  // must equal the block size in the directive

extern "C" __global__ void fused_add_rms_norm_simple(__nv_bfloat16* input, __nv_bfloat16* residual,
                                                     const __nv_bfloat16* weight, float epsilon,
                                                     int hidden_size) {
  __shared__ float partial[kThreads];
  __nv_bfloat16* x = input + static_cast<size_t>(blockIdx.x) * hidden_size;
  __nv_bfloat16* r = residual + static_cast<size_t>(blockIdx.x) * hidden_size;

  // residual = bf16(input + residual); sum the squares of the stored values.
  float sum = 0.0f;
  for (int i = threadIdx.x; i < hidden_size; i += kThreads) {
    const __nv_bfloat16 s = __float2bfloat16(__bfloat162float(x[i]) + __bfloat162float(r[i]));
    r[i] = s;
    const float v = __bfloat162float(s);
    sum += v * v;
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  const float inv_rms = rsqrtf(partial[0] / hidden_size + epsilon);

  // Each thread reads back only the residual elements it wrote above.
  for (int i = threadIdx.x; i < hidden_size; i += kThreads) {
    x[i] = __float2bfloat16(__bfloat162float(r[i]) * inv_rms * __bfloat162float(weight[i]));
  }
}
