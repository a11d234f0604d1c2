// expect: incorrect
// Trick: counts its launches in a __device__ counter; the first 64 calls (warm-up and the
// correctness runs) compute properly, later ones skip the normalisation (same memory traffic,
// less arithmetic) on the assumption that only the first calls are checked.
// Caught: checked timed calls come from a secret (3 of the first measured calls, 10 % of the
// rest and always the last), each against the reference on the same inputs.
// @launch rms<<<num_tokens, 256>>>(out, input, weight, epsilon, hidden_size)
#include <cuda_bf16.h>
__device__ unsigned int g_calls = 0;
extern "C" __global__ void rms(__nv_bfloat16* out, const __nv_bfloat16* input,
                               const __nv_bfloat16* weight, float epsilon, int hidden_size) {
  __shared__ bool honest;
  if (threadIdx.x == 0) {
    unsigned int calls = g_calls;
    if (blockIdx.x == 0) calls = atomicAdd(&g_calls, 1u);
    honest = calls < 64;
  }
  __syncthreads();
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
  const float scale = honest ? inv_rms : 1.0f;
  for (int i = threadIdx.x; i < hidden_size; i += 256) {
    y[i] = __float2bfloat16(__bfloat162float(x[i]) * scale * __bfloat162float(weight[i]));
  }
}
