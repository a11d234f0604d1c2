// expect: timeout
// Trick: tries to outrun the timer with a straggler: the last block leaves its row for later and
// waits for a flag that the *next* call sets, hoping the timer stops when most blocks are done
// and that the row gets finished "for free" during the next call.
// Caught: a call ends when its last block ends (CUPTI's kernel end), and the runner waits for
// each call to finish before the next one starts; the flag never comes, the wait hits the
// deadline and the step is a timeout.
// @launch rms<<<num_tokens, 256>>>(out, input, weight, epsilon, hidden_size)
#include <cuda_bf16.h>
__device__ volatile unsigned int g_tickets = 0;
extern "C" __global__ void rms(__nv_bfloat16* out, const __nv_bfloat16* input,
                               const __nv_bfloat16* weight, float epsilon, int hidden_size) {
  if (blockIdx.x == gridDim.x - 1) {
    // One ticket per call; released when the next call's straggler takes the next ticket.
    __shared__ unsigned int ticket;
    if (threadIdx.x == 0) ticket = atomicAdd(const_cast<unsigned int*>(&g_tickets), 1u);
    __syncthreads();
    while (g_tickets <= ticket + 1) {
    }
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
}
