// expect: timeout
// Trick: spins on the clock instead of finishing (a stand-in for any kernel that hangs, e.g. one
// waiting on a flag no one sets), hoping the harness waits forever or reports a huge time as
// "correct but slow".
// Caught: every wait on the GPU is bounded (2 s by default); the runner reports a timeout and
// the server kills its process group (only SIGKILL stops a spinning kernel) and uses a spare.
// @launch rms<<<num_tokens, 256>>>(out, input, weight, epsilon, hidden_size)
#include <cuda_bf16.h>
__device__ volatile int g_never = 0;
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
  const long long start = clock64();
  while (clock64() - start >= 0) {
    if (g_never) break;
  }
  for (int i = threadIdx.x; i < hidden_size; i += 256) {
    y[i] = __float2bfloat16(__bfloat162float(x[i]) * inv_rms * __bfloat162float(weight[i]));
  }
}
