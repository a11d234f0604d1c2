// expect: incorrect
// task: llm/fused_add_rms_norm_static_fp8_quant
// Trick: leaves epsilon out of the norm (rsqrt of the bare mean square), reasoning that the
// output is only an fp8 e4m3 value, one step of which is 6 to 12 %: with a residual stream of
// unit scale or more epsilon moves the result by a few 1e-6 relative, so dropping it (and its
// scalar argument) can never show. Host emulation: within the tolerance on every visible case
// and every hidden case but the one below (mean squares of 1.3 and up, the captured ones too).
// Caught: the hidden case h_epsilon_matters, a residual stream of rms 2.2e-3 (mean square 5e-6,
// half of epsilon 1e-5): without epsilon every output is about 1.7 times too large, and 65,487
// of its 65,536 results are more than one e4m3 step off (host emulation).
//
// clang-format off
// @launch add_norm_quant_no_epsilon<<<num_tokens, 256>>>(result, input, residual, weight, scale, hidden_size)
// clang-format on

#include <cuda_bf16.h>
#include <cuda_fp8.h>

constexpr int kThreads = 256;  // must equal the block size in the directive

extern "C" __global__ void add_norm_quant_no_epsilon(__nv_fp8_e4m3* result,
                                                     const __nv_bfloat16* input,
                                                     __nv_bfloat16* residual,
                                                     const __nv_bfloat16* weight,
                                                     const float* scale, int hidden_size) {
  __shared__ float partial[kThreads];
  const size_t row = static_cast<size_t>(blockIdx.x) * hidden_size;
  float sum = 0.0f;
  for (int i = threadIdx.x; i < hidden_size; i += kThreads) {
    const __nv_bfloat16 s =
        __float2bfloat16(__bfloat162float(input[row + i]) + __bfloat162float(residual[row + i]));
    residual[row + i] = s;
    const float v = __bfloat162float(s);
    sum += v * v;
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  const float inv_rms = rsqrtf(partial[0] / hidden_size);
  const float inverse_scale = 1.0f / scale[0];
  // Each thread reads back only the residual elements it wrote above.
  for (int i = threadIdx.x; i < hidden_size; i += kThreads) {
    const float y = __bfloat162float(residual[row + i]) * inv_rms * __bfloat162float(weight[i]) *
                    inverse_scale;
    result[row + i] = __nv_fp8_e4m3(fminf(fmaxf(y, -448.0f), 448.0f));
  }
}
