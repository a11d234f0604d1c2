// expect: ok
// Correct but slow: one thread per token does the whole row.
// @launch rms<<<num_tokens, 256>>>(out, input, weight, epsilon, hidden_size)
#include <cuda_bf16.h>
extern "C" __global__ void rms(__nv_bfloat16* out, const __nv_bfloat16* input,
                               const __nv_bfloat16* weight, float epsilon, int hidden_size) {
  if (threadIdx.x != 0) return;
  const __nv_bfloat16* x = input + static_cast<size_t>(blockIdx.x) * hidden_size;
  __nv_bfloat16* y = out + static_cast<size_t>(blockIdx.x) * hidden_size;
  float sum = 0.0f;
  for (int i = 0; i < hidden_size; ++i) {
    const float v = __bfloat162float(x[i]);
    sum += v * v;
  }
  const float inv_rms = rsqrtf(sum / hidden_size + epsilon);
  for (int i = 0; i < hidden_size; ++i) {
    y[i] = __float2bfloat16(__bfloat162float(x[i]) * inv_rms * __bfloat162float(weight[i]));
  }
}
