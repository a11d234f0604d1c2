// A wrong solution for llm/rms_norm: compiles and runs, but never multiplies by the weight.
//
// The server must answer `incorrect`. With weight ~ N(1, 0.1) the outputs are off by about
// 10% on average: far outside the bf16 tolerance, yet close enough that only an element-wise
// comparison catches it.
//
// @launch rms_norm_unweighted<<<num_tokens, 256>>>(out, input, weight, epsilon, hidden_size)

#include <cuda_bf16.h>

constexpr int kThreads = 256;

extern "C" __global__ void rms_norm_unweighted(__nv_bfloat16* out, const __nv_bfloat16* input,
                                               const __nv_bfloat16* weight, float epsilon,
                                               int hidden_size) {
  (void)weight;  // the bug: the learned scale is ignored
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
    y[i] = __float2bfloat16(__bfloat162float(x[i]) * inv_rms);
  }
}
