// expect: incorrect
// task: llm/silu_and_mul_fp8_quant
// Trick: cuts silu's tails: a gate below -8 is taken as silu 0 and one above 8 as the gate
// itself (sigmoid(8) = 0.99966), so the exp and the division run only on [-8, 8] and the tails
// cost a compare. The product is rounded to fp8 e4m3 anyway, whose steps are 6 to 12 %, and a
// trained model's gate activations of unit scale never reach -8: every visible case and every
// hidden case but the one below (captured gates within [-4.6, 4.2]) lands within one step.
// Caught: the hidden case h_large_values (gate and up of std 30, scale 2): 39 % of its gates lie
// below -8, where silu(g) * u / scale is still up to ~0.1 (silu(-8) = -2.7e-3 times |u| up to
// ~100), far above the atol 2^-9 of a zeroed output; host emulation: about 4,400 of its 158,720
// outputs fail.
//
// clang-format off
// @launch silu_quant_cutoff<<<cdiv(num_tokens * d, 256), 256>>>(result, input, scale, num_tokens, d)
// clang-format on

#include <cuda_bf16.h>
#include <cuda_fp8.h>

constexpr float kGateCutoff = 8.0f;

extern "C" __global__ void silu_quant_cutoff(__nv_fp8_e4m3* result, const __nv_bfloat16* input,
                                             const float* scale, int num_tokens, int d) {
  const long long index = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= static_cast<long long>(num_tokens) * d) return;
  const long long row = index / d;
  const long long col = index % d;
  const float g = __bfloat162float(input[row * 2 * d + col]);
  const float u = __bfloat162float(input[row * 2 * d + d + col]);
  float silu;
  if (g < -kGateCutoff) {
    silu = 0.0f;
  } else if (g > kGateCutoff) {
    silu = g;
  } else {
    silu = g * __frcp_rn(1.0f + __expf(-g));
  }
  const float y = silu * u * __frcp_rn(scale[0]);
  result[index] = __nv_fp8_e4m3(fminf(fmaxf(y, -448.0f), 448.0f));
}
