// A correct, deliberately simple solution for llm/rms_norm: scalar loads, shared-memory tree sum.
//
// Slower than the reference (2-byte loads, a barrier per reduction step), but right on every
// shape, so it scores a positive correctness gate and a speedup below 1.
//
// @launch rms_norm_simple<<<num_tokens, 256>>>(out, input, weight, epsilon, hidden_size)

#include <cuda_bf16.h>

constexpr int kThreads = 256;  // must equal the block size in the directive

extern "C" __global__ void rms_norm_simple(__nv_bfloat16* out, const __nv_bfloat16* input,
                                           const __nv_bfloat16* weight, float epsilon,
                                           int hidden_size) {
  __shared__ float partial[kThreads];
  const __nv_bfloat16* x = input + static_cast<size_t>(blockIdx.x) * hidden_size;
  __nv_bfloat16* y = out + static_cast<size_t>(blockIdx.x) * hidden_size;

  float sum = 0.0f;
  for (int i = threadIdx.x; i < hidden_size; i += kThreads) {
    const float v = __bfloat162float(x[i]);
    sum += v * v;
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  const float inv_rms = rsqrtf(partial[0] / hidden_size + epsilon);

  for (int i = threadIdx.x; i < hidden_size; i += kThreads) {
    y[i] = __float2bfloat16(__bfloat162float(x[i]) * inv_rms * __bfloat162float(weight[i]));
  }
}
