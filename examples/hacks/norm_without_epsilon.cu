// expect: incorrect
// Trick: leaves epsilon out (rsqrt of the bare mean square, one add fewer), on the assumption
// that hidden states are of unit scale, where epsilon (1e-5) moves the output by 5e-6
// relative, far inside one bf16 ulp. Host emulation puts it within 0.65 of the tolerance on
// every visible case and every hidden case but the two below, like a correct kernel.
// Caught: the hidden cases h_epsilon_matters (rms 3e-3, epsilon 1e-5) and
// h_epsilon_matters_qwen (rms 1e-3, epsilon 1e-6), where the mean square is of the order of
// epsilon: leaving it out scales the outputs by up to 1.5 (host emulation: all but one of
// their 214,016 elements fail).
// @launch rms_norm_no_epsilon<<<num_tokens, 256>>>(out, input, weight, epsilon, hidden_size)

#include <cuda_bf16.h>

constexpr int kThreads = 256;  // must equal the block size in the directive

extern "C" __global__ void rms_norm_no_epsilon(__nv_bfloat16* out, const __nv_bfloat16* input,
                                               const __nv_bfloat16* weight, float epsilon,
                                               int hidden_size) {
  __shared__ float partial[kThreads];
  const __nv_bfloat16* x = input + static_cast<size_t>(blockIdx.x) * hidden_size;
  __nv_bfloat16* y = out + static_cast<size_t>(blockIdx.x) * hidden_size;

  float sum = 0.0f;
  for (int i = threadIdx.x; i < hidden_size; i += kThreads) {
    const float v = __bfloat162float(x[i]);
    sum += v * v;
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  const float inv_rms = rsqrtf(partial[0] / hidden_size);

  for (int i = threadIdx.x; i < hidden_size; i += kThreads) {
    y[i] = __float2bfloat16(__bfloat162float(x[i]) * inv_rms * __bfloat162float(weight[i]));
  }
}
