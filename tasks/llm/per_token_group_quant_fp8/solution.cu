// A correct, deliberately simple solution for llm/per_token_group_quant_fp8: one 128-thread
// block per group, one element per thread, a shared-memory tree max and an IEEE division.
//
// Slower than the reference (a barrier per reduction step, 1-byte stores, 128 threads for 256
// bytes of input), but right on every shape.
//
// clang-format off
// @launch group_quant_simple<<<num_tokens * num_groups, 128>>>(input, out, scale, eps, column_major_scales, num_tokens, num_groups)
// clang-format on

#include <cuda_bf16.h>
#include <cuda_fp8.h>

constexpr int kGroupSize = 128;  // must equal the block size in the directive

extern "C" __global__ void group_quant_simple(const __nv_bfloat16* input, __nv_fp8_e4m3* out,
                                              float* scale, float eps, int column_major_scales,
                                              int num_tokens, int num_groups) {
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
  const float s = fmaxf(partial[0], eps) / 448.0f;
  if (threadIdx.x == 0) {
    const int token = blockIdx.x / num_groups;
    const int g = blockIdx.x % num_groups;
    scale[column_major_scales ? static_cast<size_t>(g) * num_tokens + token : blockIdx.x] = s;
  }
  out[base + threadIdx.x] = __nv_fp8_e4m3(fminf(fmaxf(x / s, -448.0f), 448.0f));
}
