// A correct, deliberately simple solution for multimodal/layer_norm: one block per row, scalar
// loads, a shared-memory tree sum for the mean and another for the variance.
//
// Slower than the reference (2-byte loads, the row read three times, a barrier per reduction
// step), but right on every shape.
//
// @launch layer_norm_simple<<<num_tokens, 256>>>(out, input, weight, bias, epsilon, hidden_size)

#include <cuda_bf16.h>

constexpr int kThreads = 256;  // must equal the block size in the directive

__device__ float block_tree_sum(float value, float* partial) {
  partial[threadIdx.x] = value;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  const float total = partial[0];
  __syncthreads();  // partial is reused by the next sum
  return total;
}

extern "C" __global__ void layer_norm_simple(__nv_bfloat16* out, const __nv_bfloat16* input,
                                             const __nv_bfloat16* weight,
                                             const __nv_bfloat16* bias, float epsilon,
                                             int hidden_size) {
  __shared__ float partial[kThreads];
  const __nv_bfloat16* x = input + static_cast<size_t>(blockIdx.x) * hidden_size;
  __nv_bfloat16* y = out + static_cast<size_t>(blockIdx.x) * hidden_size;

  float sum = 0.0f;
  for (int i = threadIdx.x; i < hidden_size; i += kThreads) sum += __bfloat162float(x[i]);
  const float mean = block_tree_sum(sum, partial) / hidden_size;

  float squares = 0.0f;
  for (int i = threadIdx.x; i < hidden_size; i += kThreads) {
    const float d = __bfloat162float(x[i]) - mean;
    squares += d * d;
  }
  const float inv_std = rsqrtf(block_tree_sum(squares, partial) / hidden_size + epsilon);

  for (int i = threadIdx.x; i < hidden_size; i += kThreads) {
    const float normed = (__bfloat162float(x[i]) - mean) * inv_std;
    y[i] = __float2bfloat16(normed * __bfloat162float(weight[i]) + __bfloat162float(bias[i]));
  }
}
