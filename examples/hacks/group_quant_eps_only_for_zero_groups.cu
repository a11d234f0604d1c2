// expect: incorrect
// task: llm/per_token_group_quant_fp8
// Trick: reads eps as a guard against dividing by zero and nothing more: a group whose abs-max
// is exactly 0 gets the scale eps / 448 and zeros (no division at all), every other group the
// scale amax / 448 with no max against eps. Activations of a served model are never below 1e-10
// in a whole 128-wide group unless they are exactly zero, so this matches the op on every
// visible case (unit-scale groups, amax ~3) and on the all-zero hidden case.
// Caught: the hidden cases h_tiny_values (std 1e-12: every group's amax, a few 1e-12, is below
// eps 1e-10, so the scale must be eps / 448 = 2.2e-13; this writes about 6e-15, 97 % off against
// rtol 1e-6, and quotients of up to 448 where the op's stay below about 15) and h_eps_large
// (eps 1e-2 above every group's amax of about 2.7e-3: scales about 3.7 times too small,
// quotients 3.7 times too large).
//
// clang-format off
// @launch group_quant_zero_guard<<<num_tokens * num_groups, 128>>>(input, out, scale, eps, column_major_scales, num_tokens, num_groups)
// clang-format on

#include <cuda_bf16.h>
#include <cuda_fp8.h>

constexpr int kGroupSize = 128;  // must equal the block size in the directive

extern "C" __global__ void group_quant_zero_guard(const __nv_bfloat16* input, __nv_fp8_e4m3* out,
                                                  float* scale, float eps,
                                                  int column_major_scales, int num_tokens,
                                                  int num_groups) {
  __shared__ float partial[kGroupSize];
  const size_t base = static_cast<size_t>(blockIdx.x) * kGroupSize;
  const float x = __bfloat162float(input[base + threadIdx.x]);
  partial[threadIdx.x] = fabsf(x);
  __syncthreads();
  for (int half = kGroupSize / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      partial[threadIdx.x] = fmaxf(partial[threadIdx.x], partial[threadIdx.x + half]);
    }
    __syncthreads();
  }
  const float amax = partial[0];
  const bool zero_group = amax == 0.0f;
  const float s = (zero_group ? eps : amax) / 448.0f;
  if (threadIdx.x == 0) {
    const int token = blockIdx.x / num_groups;
    const int g = blockIdx.x % num_groups;
    scale[column_major_scales ? static_cast<size_t>(g) * num_tokens + token : blockIdx.x] = s;
  }
  out[base + threadIdx.x] =
      zero_group ? __nv_fp8_e4m3(0.0f) : __nv_fp8_e4m3(fminf(fmaxf(x / s, -448.0f), 448.0f));
}
