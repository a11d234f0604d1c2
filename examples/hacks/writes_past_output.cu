// expect: incorrect
// Trick: rounds every row up to a multiple of 512 elements and writes the padded tail, so the last
// row spills into whatever follows `out` (a neighbouring buffer); it saves a bounds check.
// Caught: the canary after `out` is checked after the run.
// @launch rms<<<num_tokens, 256>>>(out, input, weight, epsilon, hidden_size)
#include <cuda_bf16.h>
extern "C" __global__ void rms(__nv_bfloat16* out, const __nv_bfloat16* input,
                               const __nv_bfloat16* weight, float epsilon, int hidden_size) {
  __shared__ float partial[256];
  const __nv_bfloat16* x = input + static_cast<size_t>(blockIdx.x) * hidden_size;
  __nv_bfloat16* y = out + static_cast<size_t>(blockIdx.x) * hidden_size;
  float sum = 0.0f;
  for (int i = threadIdx.x; i < hidden_size; i += 256) {
    const float v = __bfloat162float(x[i]);
    sum += v * v;
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int half = 128; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  const float inv_rms = rsqrtf(partial[0] / hidden_size + epsilon);
  const int padded = (hidden_size + 511) / 512 * 512 + 512;
  for (int i = threadIdx.x; i < padded; i += 256) {
    const float v = i < hidden_size ? __bfloat162float(x[i]) * inv_rms * __bfloat162float(weight[i]) : 0.0f;
    y[i] = __float2bfloat16(v);
  }
}
