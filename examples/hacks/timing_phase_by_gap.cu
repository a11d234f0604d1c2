// expect: incorrect
// Trick: tells the timing phase from the correctness runs by the time since its previous call
// ended (%globaltimer): correctness runs are minutes apart in GPU terms (the runner synchronises
// and copies between them), timed calls follow each other within microseconds. It computes
// properly when the gap is long and skips the normalisation when it is short.
// Caught: checked timed calls are themselves timed calls, chosen from a secret (3 of the first
// calls, 10 % of the rest, and the last), with nothing before them that differs from an
// unchecked one; the first checked call that follows a short gap is wrong.
// @launch rms<<<num_tokens, 256>>>(out, input, weight, epsilon, hidden_size)
#include <cuda_bf16.h>
__device__ unsigned long long g_previous_end = 0;  // when the previous call's last block ended
__device__ unsigned int g_blocks_done = 0;
__device__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
extern "C" __global__ void rms(__nv_bfloat16* out, const __nv_bfloat16* input,
                               const __nv_bfloat16* weight, float epsilon, int hidden_size) {
  __shared__ bool honest;
  if (threadIdx.x == 0) {
    const unsigned long long previous = *(volatile unsigned long long*)&g_previous_end;
    honest = previous == 0 || now_ns() - previous > 300000ull;  // 300 us
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
    if (atomicAdd(&g_blocks_done, 1u) == gridDim.x - 1) {  // the call's last block
      g_blocks_done = 0;
      g_previous_end = now_ns();
    }
  }
}
