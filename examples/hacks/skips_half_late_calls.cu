// expect: incorrect
// Trick: counts its calls; the first 100 (every correctness run and the start of timing) are
// computed properly, after that a pseudo-random half of the calls skip the normalisation. Fast
// on half of the timed calls, the median drops while most checked calls would still pass if
// only a few were checked.
// Caught: each case checks at least 4 calls (3 of the first, the last, 10 % of the rest), so a
// kernel wrong on half of its calls escapes one case with probability (1/2)^4 and a task of
// several visible cases with a vanishing one (docs/runner.md, "How a cheat ... escapes").
// @launch rms<<<num_tokens, 256>>>(out, input, weight, epsilon, hidden_size)
#include <cuda_bf16.h>
__device__ unsigned int g_calls = 0;
__device__ unsigned int g_blocks_done = 0;
extern "C" __global__ void rms(__nv_bfloat16* out, const __nv_bfloat16* input,
                               const __nv_bfloat16* weight, float epsilon, int hidden_size) {
  __shared__ bool honest;
  if (threadIdx.x == 0) {
    const unsigned int call = *(volatile unsigned int*)&g_calls;
    const unsigned int hash = (call * 2654435761u) >> 16;
    honest = call < 100 || (hash & 1u) == 0;
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
  const float scale = honest ? rsqrtf(partial[0] / hidden_size + epsilon) : 1.0f;
  for (int i = threadIdx.x; i < hidden_size; i += 256) {
    y[i] = __float2bfloat16(__bfloat162float(x[i]) * scale * __bfloat162float(weight[i]));
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(&g_blocks_done, 1u) == gridDim.x - 1) {
      g_blocks_done = 0;
      ++g_calls;
    }
  }
}
