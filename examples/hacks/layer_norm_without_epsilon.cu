// expect: incorrect
// task: multimodal/layer_norm
// Trick: leaves epsilon out of rsqrt(var + epsilon), on the assumption that vision-encoder
// tokens have unit-scale deviations: there epsilon (1e-6, or 1e-5 for CLIP) moves the output by
// at most 5e-6 relative, far inside a bf16 ulp, so the result is as exact as a correct kernel's
// on every visible case and on every hidden case but the one below (including the large offset
// and the high-norm rows, whose variances are 16 and 3600).
// Caught: the hidden case h_tiny_deviation (rows of deviation 1e-3 with epsilon 1e-6: the
// variance is of epsilon's size): leaving epsilon out scales the normalised values by about
// sqrt(2) = 1.41, an error of 0.41 |normed * weight| against a tolerance of 1e-2 + 1.6e-2 |out|
// (host emulation: 0.24 on average; 97 % of its 38,016 elements fail).
// clang-format off
// @launch layer_norm_no_epsilon<<<num_tokens, 256>>>(out, input, weight, bias, epsilon, hidden_size)
// clang-format on

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
  __syncthreads();
  return total;
}

extern "C" __global__ void layer_norm_no_epsilon(__nv_bfloat16* out, const __nv_bfloat16* input,
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
  const float inv_std = rsqrtf(block_tree_sum(squares, partial) / hidden_size);

  for (int i = threadIdx.x; i < hidden_size; i += kThreads) {
    const float normed = (__bfloat162float(x[i]) - mean) * inv_std;
    y[i] = __float2bfloat16(normed * __bfloat162float(weight[i]) + __bfloat162float(bias[i]));
  }
}
