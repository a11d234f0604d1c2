// Reference for llm/per_token_group_quant_fp8: vLLM's per-token-group dynamic FP8 e4m3
// quantizer of bf16 activations, group size 128, fp32 scales in row- or column-major layout,
// bit-for-bit vLLM's arithmetic.
//
// For every token t and 128-channel group g:
//
//   s = max(eps, max_j |input[t, g, j]|) / 448
//   out[t, g, j] = e4m3_satfinite_rn(clamp(input[t, g, j] / s, -448, 448))
//   scale[column_major_scales ? g * num_tokens + t : t * num_groups + g] = s
//
// The quotients are the IEEE fp32 divisions vLLM performs, rounded once more to e4m3: the
// e4m3 outputs are exactly those of the correctly rounded quotients (see quotient()).
//
// Launch plan: eight threads per group (a group of 128 bf16 is 256 bytes: two 16-byte vectors
// per thread), 16 groups per 128-thread block, one block per 16 consecutive groups in memory
// order (token-major). 1 decode token of DeepSeek-V3 (56 groups) is 4 blocks; a 4096-token
// chunk of expert down-projection inputs (32768 x 16 groups) is 32768 blocks.
//
// clang-format off
// @launch per_token_group_quant_fp8_kernel<<<cdiv(num_tokens * num_groups, 16), 128>>>(input, out, scale, eps, column_major_scales, num_tokens, num_groups)
// clang-format on
//
// Design notes:
// - Memory bound: 3 bytes moved per element plus a scale per 128. Each thread issues both of
//   its 16-byte loads before any arithmetic (two loads in flight), so a group costs one memory
//   round trip; the group's amax is reduced over its eight lanes with three shuffles, no
//   shared memory and no barrier. The lanes of a group read its 256 bytes as two fully
//   coalesced 128-byte halves (lane l: vectors l and l + 8), and write two 64-byte halves.
// - The quotient x / s is formed as q = x * r with r = RN(1 / s) once per group, then corrected
//   once with the exact residual: q + RN(x - q * s) * r (two FMAs). This is the quotient
//   llm/dynamic_per_token_scaled_fp8_quant's reference uses; its test (every bf16 x against
//   6000 scales) shows it equal to the IEEE quotient wherever e4m3 can tell them apart, and the
//   argument is invariant under scaling by powers of two, so it holds for the smaller scales
//   eps allows here (down to 2^-42: no subnormal scale or reciprocal).
// - Scales are written by lane 0 of each group. Column-major scales scatter with a stride of
//   num_tokens floats, as vLLM's kernel does; they are 1/512 of the bytes.

#include <cuda_bf16.h>
#include <cuda_fp8.h>

namespace {

constexpr int kGroupSize = 128;
// Threads that share one group; a power of two dividing the warp (the shuffle mask relies on it).
constexpr int kThreadsPerGroup = 8;
// Threads per block; must equal the block size in the directive.
constexpr int kThreads = 128;
constexpr int kGroupsPerBlock = kThreads / kThreadsPerGroup;
// bf16 elements per 16-byte vector.
constexpr int kVectorElems = 8;
// Largest finite e4m3 (e4m3fn).
constexpr float kFp8Max = 448.0f;

__device__ __forceinline__ float vector_abs_max(const uint4 vector, float amax) {
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&vector);
#pragma unroll
  for (int i = 0; i < kVectorElems / 2; ++i) {
    const float2 v = __bfloat1622float2(pairs[i]);
    amax = fmaxf(amax, fmaxf(fabsf(v.x), fabsf(v.y)));
  }
  return amax;
}

// x / s given inverse = RN(1 / s), corrected once by the exact residual (Markstein's step), so
// that it rounds to e4m3 as the IEEE quotient does.
__device__ __forceinline__ float scaled(float x, float s, float inverse) {
  const float q = x * inverse;
  const float quotient = fmaf(fmaf(-q, s, x), inverse, q);
  return fminf(fmaxf(quotient, -kFp8Max), kFp8Max);
}

// The 8 values of one vector divided by s and rounded to e4m3, element 0 in the lowest byte.
__device__ __forceinline__ uint2 quantize(const uint4 vector, float s, float inverse) {
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&vector);
  unsigned int packed[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const float2 a = __bfloat1622float2(pairs[2 * half]);
    const float2 b = __bfloat1622float2(pairs[2 * half + 1]);
    // __nv_cvt_float2_to_fp8x2 puts .x in the low byte.
    const unsigned int low = __nv_cvt_float2_to_fp8x2(
        make_float2(scaled(a.x, s, inverse), scaled(a.y, s, inverse)), __NV_SATFINITE, __NV_E4M3);
    const unsigned int high = __nv_cvt_float2_to_fp8x2(
        make_float2(scaled(b.x, s, inverse), scaled(b.y, s, inverse)), __NV_SATFINITE, __NV_E4M3);
    packed[half] = low | (high << 16);
  }
  return make_uint2(packed[0], packed[1]);
}

}  // namespace

// input, out: [num_tokens, num_groups, 128]; scale: num_tokens * num_groups floats.
extern "C" __global__ void __launch_bounds__(kThreads)
    per_token_group_quant_fp8_kernel(const __nv_bfloat16* __restrict__ input,
                                     __nv_fp8_e4m3* __restrict__ out, float* __restrict__ scale,
                                     float eps, int column_major_scales, int num_tokens,
                                     int num_groups) {
  const long long group = static_cast<long long>(blockIdx.x) * kGroupsPerBlock +
                          static_cast<long long>(threadIdx.x / kThreadsPerGroup);
  const int lane = static_cast<int>(threadIdx.x % kThreadsPerGroup);
  // A whole group's lanes leave together, so the shuffles below only involve live lanes.
  if (group >= static_cast<long long>(num_tokens) * num_groups) return;

  const uint4* x = reinterpret_cast<const uint4*>(input + group * kGroupSize);
  const uint4 first = x[lane];
  const uint4 second = x[lane + kThreadsPerGroup];

  float amax = vector_abs_max(second, vector_abs_max(first, eps));
  const unsigned int mask = 0xffu << (threadIdx.x & 24u);
#pragma unroll
  for (int offset = kThreadsPerGroup / 2; offset > 0; offset >>= 1) {
    amax = fmaxf(amax, __shfl_xor_sync(mask, amax, offset));
  }
  const float s = amax / kFp8Max;
  const float inverse = __frcp_rn(s);

  if (lane == 0) {
    const long long token = group / num_groups;
    const long long g = group - token * num_groups;
    scale[column_major_scales != 0 ? g * num_tokens + token : group] = s;
  }

  uint2* y =
      reinterpret_cast<uint2*>(reinterpret_cast<__nv_fp8_storage_t*>(out) + group * kGroupSize);
  y[lane] = quantize(first, s, inverse);
  y[lane + kThreadsPerGroup] = quantize(second, s, inverse);
}
