// expect: incorrect
// task: multimodal/gelu_tanh_and_mul
// Trick: writes tanh(z) as (e^2z - 1) / (e^2z + 1) with the hardware exponential (__expf)
// instead of the library tanhf: one ex2 and a division per output instead of tanhf's branches
// and polynomial. It is accurate wherever e^2z stays finite: for unit-scale gates z stays below
// about 10 (g < 5.5, more than five deviations), so every visible case, and every hidden case
// but one, is within a few fp32 ulps of the reference; for very negative z, e^2z underflows to 0
// and the quotient is the right -1.
// Caught: the hidden case h_large_gates (gates of deviation 20): for g above about 9.3, 2z
// exceeds 88.7, e^2z overflows to inf and inf / inf is NaN, on about a third of its 245,760
// outputs, where the reference is finite (NaN must match exactly).
// @launch gelu_tanh_exp<<<dim3(cdiv(d, 256), num_tokens), 256>>>(out, input, d)

#include <cuda_bf16.h>

extern "C" __global__ void gelu_tanh_exp(__nv_bfloat16* out, const __nv_bfloat16* input, int d) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= d) return;
  const size_t row = blockIdx.y;
  const float g = __bfloat162float(input[row * 2 * d + col]);
  const float u = __bfloat162float(input[row * 2 * d + d + col]);
  const float z = 0.7978845608028654f * (g + 0.044715f * g * g * g);
  const float e = __expf(2.0f * z);
  const float tanh_z = (e - 1.0f) / (e + 1.0f);
  out[row * d + col] = __float2bfloat16(0.5f * g * (1.0f + tanh_z) * u);
}
