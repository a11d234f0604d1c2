// A correct, deliberately simple solution for llm/silu_and_mul_fp8_quant: one thread per output,
// scalar loads, IEEE exp and division, 1-byte stores.
//
// Slower than the reference (2-byte loads and 1-byte stores, a full-precision exp and two
// divisions per output), but right on every shape.
//
// clang-format off
// @launch silu_and_mul_quant_simple<<<cdiv(num_tokens * d, 256), 256>>>(result, input, scale, num_tokens, d)
// clang-format on

#include <cuda_bf16.h>
#include <cuda_fp8.h>

extern "C" __global__ void silu_and_mul_quant_simple(__nv_fp8_e4m3* result,
                                                     const __nv_bfloat16* input, const float* scale,
                                                     int num_tokens, int d) {
  const long long index = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= static_cast<long long>(num_tokens) * d) return;
  const long long row = index / d;
  const long long col = index % d;
  const float g = __bfloat162float(input[row * 2 * d + col]);
  const float u = __bfloat162float(input[row * 2 * d + d + col]);
  const float y = g / (1.0f + expf(-g)) * u / scale[0];
  result[index] = __nv_fp8_e4m3(fminf(fmaxf(y, -448.0f), 448.0f));
}
