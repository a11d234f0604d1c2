// A correct, deliberately simple solution for llm/fused_add_rms_norm_static_fp8_quant: scalar
// loads, a shared-memory tree sum, the stored residual re-read for the scaling, an IEEE
// division by the scale.
//
// Slower than the reference (2-byte loads, 1-byte stores, a barrier per reduction step, a
// second read of the row), but right on every shape.
//
// clang-format off
// @launch add_norm_quant_simple<<<num_tokens, 256>>>(result, input, residual, weight, scale, epsilon, hidden_size)
// clang-format on

#include <cuda_bf16.h>
#include <cuda_fp8.h>

constexpr int kThreads = 256;  // must equal the block size in the directive

extern "C" __global__ void add_norm_quant_simple(__nv_fp8_e4m3* result, const __nv_bfloat16* input,
                                                 __nv_bfloat16* residual,
                                                 const __nv_bfloat16* weight, const float* scale,
                                                 float epsilon, int hidden_size) {
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
  const float inv_rms = rsqrtf(partial[0] / hidden_size + epsilon);
  const float s = scale[0];
  // Each thread reads back only the residual elements it wrote above.
  for (int i = threadIdx.x; i < hidden_size; i += kThreads) {
    const float y = __bfloat162float(residual[row + i]) * inv_rms * __bfloat162float(weight[i]) / s;
    result[row + i] = __nv_fp8_e4m3(fminf(fmaxf(y, -448.0f), 448.0f));
  }
}
