// expect: incorrect
// Trick: tries to outrun the timer by pipelining across calls: each call only stores its input
// pointer and writes the output of the previous call's input, so the expensive pass of call N
// hides inside call N+1 (and the first call of a timing loop looks free).
// Caught: a call's duration covers all its kernels from first start to last end, outputs are
// poisoned before each call and checked, and the second correctness run and every timed call
// use other inputs: the outputs belong to the wrong inputs (or, on the first call, to none).
// @launch rms<<<num_tokens, 256>>>(out, input, weight, epsilon, hidden_size)
#include <cuda_bf16.h>
__device__ const __nv_bfloat16* g_previous_input = nullptr;
extern "C" __global__ void rms(__nv_bfloat16* out, const __nv_bfloat16* input,
                               const __nv_bfloat16* weight, float epsilon, int hidden_size) {
  __shared__ float partial[256];
  const __nv_bfloat16* source = g_previous_input;
  __syncthreads();
  __nv_bfloat16* y = out + static_cast<size_t>(blockIdx.x) * hidden_size;
  if (source == nullptr) {
    for (int i = threadIdx.x; i < hidden_size; i += 256) y[i] = __float2bfloat16(0.0f);
  } else {
    const __nv_bfloat16* x = source + static_cast<size_t>(blockIdx.x) * hidden_size;
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
  }
  __threadfence();
  if (blockIdx.x == gridDim.x - 1 && threadIdx.x == 0) g_previous_input = input;
}
