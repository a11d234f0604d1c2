// expect: incorrect
// Trick: remembers the input pointers it has seen in a __device__ table and, when called again
// with a known pointer, returns at once, assuming the output from last time is still there
// (harnesses that time one buffer in a loop reward this as an enormous speedup).
// Caught: outputs are re-poisoned before every run, the second correctness run uses other input
// values (often at the same address), and timed calls rotate input addresses and are checked:
// the skipped call leaves poison behind.
// @launch rms<<<num_tokens, 256>>>(out, input, weight, epsilon, hidden_size)
#include <cuda_bf16.h>
__device__ const __nv_bfloat16* g_seen[16];
__device__ unsigned int g_next = 0;
extern "C" __global__ void rms(__nv_bfloat16* out, const __nv_bfloat16* input,
                               const __nv_bfloat16* weight, float epsilon, int hidden_size) {
  for (int i = 0; i < 16; ++i) {
    if (g_seen[i] == input) return;
  }
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
  for (int i = threadIdx.x; i < hidden_size; i += 256) {
    y[i] = __float2bfloat16(__bfloat162float(x[i]) * inv_rms * __bfloat162float(weight[i]));
  }
  __syncthreads();
  if (blockIdx.x == gridDim.x - 1 && threadIdx.x == 0) g_seen[atomicAdd(&g_next, 1u) % 16] = input;
}
