// expect: incorrect
// Trick: keeps per-row sums of squares in a workspace and only computes them when the slot reads
// as zero, hoping the workspace still holds last call's sums (freshly allocated memory is often
// zero, and a reused one holds the previous values).
// Caught: workspaces are filled with junk before every candidate run (docs/launch_plan.md: their
// contents are unspecified), so the stale-sum path is taken with garbage and the rows mismatch.
// @launch rms<<<num_tokens, 256>>>(out, input, weight, epsilon, hidden_size, sums)
// @workspace sums float[num_tokens]
#include <cuda_bf16.h>
extern "C" __global__ void rms(__nv_bfloat16* out, const __nv_bfloat16* input,
                               const __nv_bfloat16* weight, float epsilon, int hidden_size,
                               float* sums) {
  __shared__ float partial[256];
  const __nv_bfloat16* x = input + static_cast<size_t>(blockIdx.x) * hidden_size;
  __nv_bfloat16* y = out + static_cast<size_t>(blockIdx.x) * hidden_size;
  __shared__ float row_sum;
  if (threadIdx.x == 0) row_sum = sums[blockIdx.x];
  __syncthreads();
  if (row_sum == 0.0f) {
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
    if (threadIdx.x == 0) {
      row_sum = partial[0];
      sums[blockIdx.x] = partial[0];
    }
    __syncthreads();
  }
  const float inv_rms = rsqrtf(row_sum / hidden_size + epsilon);
  for (int i = threadIdx.x; i < hidden_size; i += 256) {
    y[i] = __float2bfloat16(__bfloat162float(x[i]) * inv_rms * __bfloat162float(weight[i]));
  }
}
