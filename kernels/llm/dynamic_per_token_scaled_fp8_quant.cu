// Reference for llm/dynamic_per_token_scaled_fp8_quant: vLLM's per-token dynamic FP8 e4m3
// quantizer of bf16 activations (no scale_ub), bit-for-bit vLLM's arithmetic.
//
// For every token t:
//
//   scale[t] = max(max_i |input[t, i]| / 448, 1 / (448 * 512))
//   out[t, i] = e4m3_satfinite_rn(clamp(input[t, i] / scale[t], -448, 448))
//
// The quotients are vLLM's IEEE fp32 divisions (vLLM divides rather than multiplying by an
// inverted scale, to match FBGEMM), rounded once more to e4m3: the e4m3 outputs are exactly
// those of the correctly rounded quotients (see quotient() for how they are formed).
//
// Launch plan: one block per token. Batches of 32 tokens or more: sized so that each thread
// owns at most four 16-byte vectors (8 bf16 each) of the row: cdiv(hidden_size, 1024) warps,
// at least 4 and at most 32 (128 threads for 4096, 224 for 7168, 448 for 14336, 608 for
// 18944), which keeps many blocks resident per SM. Smaller batches occupy a few SMs at most
// and their time is one row's latency: each thread then owns one vector where the row allows
// (512 threads for 4096, up to 1024), so the per-thread chain of loads, divisions and stores
// is a quarter as long. Rows wider than 32768 elements still work: the part beyond the
// register cache is re-read.
//
// clang-format off
// @launch if (num_tokens >= 32) dynamic_per_token_scaled_fp8_quant_kernel<<<num_tokens, min(1024, max(128, cdiv(hidden_size, 1024) * 32))>>>(out, input, scale, hidden_size)
// @launch if (num_tokens < 32) dynamic_per_token_scaled_fp8_quant_kernel<<<num_tokens, min(1024, max(128, cdiv(hidden_size, 256) * 32))>>>(out, input, scale, hidden_size)
// clang-format on
//
// Design notes:
// - Memory bound: 3 bytes moved per element. One pass over memory: the row is loaded into
//   registers for the abs-max, and the quantization reads it from there after the block
//   reduction (one barrier).
// - 16-byte loads of input, 8-byte stores of out (8 e4m3 per vector), converted two at a time
//   with the sm_89+ cvt.rn.satfinite.e4m3x2.f32 instruction (__nv_cvt_float2_to_fp8x2).
// - The quotient x / scale is formed as q = x * r with r = RN(1 / scale) once per row, then
//   corrected once with the exact residual: q + RN(x - q * scale) * r (two FMAs). Measured on
//   the H200 (bench/results/h200_reference_variants.json): an IEEE division per element
//   (div.rn.f32, a range-checked instruction sequence) takes decode_1 2.05 us against 1.86,
//   decode_32 2.78 against 2.02 and prefill_8192 29.5 against 24.4; the correction costs 2-5 %
//   over a plain reciprocal product. The corrected product equals the IEEE quotient bit for bit
//   wherever e4m3 can tell them apart (quotients of magnitude 2^-11 and above; smaller ones
//   round to zero either way): a test in tests/kernels checks every bf16 x against 6000 scales,
//   2 x 10^8 pairs.
//   A plain reciprocal product would differ on e4m3 midpoints, so it is not vLLM's op.
// - Rows are aligned for vectors only when hidden_size % 8 == 0 (row t of input starts at
//   byte 2 * t * hidden_size, of out at byte t * hidden_size). Otherwise an element-wise path
//   reads the row twice (the second time from L1/L2). The branch is uniform across the block.

#include <cuda_bf16.h>
#include <cuda_fp8.h>

namespace {

// bf16 elements per 16-byte input vector (and e4m3 bytes per 8-byte output vector).
constexpr int kVectorElems = 8;
// Vectors each thread keeps in registers between the abs-max and the quantization.
constexpr int kCachedVectors = 4;
// Largest block the launch directive asks for.
constexpr int kMaxThreads = 1024;
// Largest finite e4m3 (e4m3fn).
constexpr float kFp8Max = 448.0f;
// vLLM's lower bound on a per-token scale, 1 / (448 * 512), rounded once to fp32.
constexpr float kMinScale = 1.0f / (448.0f * 512.0f);

__device__ __forceinline__ float warp_max(float value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  }
  return value;
}

// Maximum of `value` over the block, returned to every thread. blockDim.x must be a multiple
// of 32. Called once per kernel: the shared partial maxima are not protected against reuse.
__device__ __forceinline__ float block_max(float value) {
  __shared__ float warp_maxima[32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  value = warp_max(value);
  if (lane == 0) warp_maxima[warp] = value;
  __syncthreads();
  const int num_warps = blockDim.x >> 5;
  return warp_max(lane < num_warps ? warp_maxima[lane] : 0.0f);
}

// max(amax, |v|) over the 8 bf16 values of one vector.
__device__ __forceinline__ float vector_abs_max(const uint4 vector, float amax) {
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&vector);
#pragma unroll
  for (int i = 0; i < kVectorElems / 2; ++i) {
    const float2 v = __bfloat1622float2(pairs[i]);
    amax = fmaxf(amax, fmaxf(fabsf(v.x), fabsf(v.y)));
  }
  return amax;
}

// x / scale given inverse = RN(1 / scale): the product, corrected once by the exact residual
// (Markstein's step), so that it rounds to e4m3 as the IEEE quotient does.
__device__ __forceinline__ float quotient(float x, float scale, float inverse) {
  const float q = x * inverse;
  return fmaf(fmaf(-q, scale, x), inverse, q);
}

__device__ __forceinline__ float scaled(float x, float scale, float inverse) {
  return fminf(fmaxf(quotient(x, scale, inverse), -kFp8Max), kFp8Max);
}

// The 8 values of one vector divided by `scale` and rounded to e4m3, element 0 in the lowest
// byte (the order of the output row in memory).
__device__ __forceinline__ uint2 quantize(const uint4 vector, float scale, float inverse) {
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&vector);
  unsigned int packed[kVectorElems / 4];
#pragma unroll
  for (int half = 0; half < kVectorElems / 4; ++half) {
    const float2 a = __bfloat1622float2(pairs[2 * half]);
    const float2 b = __bfloat1622float2(pairs[2 * half + 1]);
    // __nv_cvt_float2_to_fp8x2 puts .x in the low byte.
    const unsigned int low = __nv_cvt_float2_to_fp8x2(
        make_float2(scaled(a.x, scale, inverse), scaled(a.y, scale, inverse)), __NV_SATFINITE,
        __NV_E4M3);
    const unsigned int high = __nv_cvt_float2_to_fp8x2(
        make_float2(scaled(b.x, scale, inverse), scaled(b.y, scale, inverse)), __NV_SATFINITE,
        __NV_E4M3);
    packed[half] = low | (high << 16);
  }
  return make_uint2(packed[0], packed[1]);
}

}  // namespace

// out: [num_tokens, hidden_size] e4m3; input: [num_tokens, hidden_size] bf16; scale:
// [num_tokens, 1] f32. All row-major.
extern "C" __global__ void __launch_bounds__(kMaxThreads)
    dynamic_per_token_scaled_fp8_quant_kernel(__nv_fp8_e4m3* __restrict__ out,
                                              const __nv_bfloat16* __restrict__ input,
                                              float* __restrict__ scale, int hidden_size) {
  const size_t row_offset = static_cast<size_t>(blockIdx.x) * static_cast<size_t>(hidden_size);
  const __nv_bfloat16* x = input + row_offset;
  __nv_fp8_storage_t* y = reinterpret_cast<__nv_fp8_storage_t*>(out) + row_offset;
  const int stride = blockDim.x;

  if (hidden_size % kVectorElems != 0) {
    float amax = 0.0f;
    for (int i = threadIdx.x; i < hidden_size; i += stride) {
      amax = fmaxf(amax, fabsf(__bfloat162float(x[i])));
    }
    const float token_scale = fmaxf(block_max(amax) / kFp8Max, kMinScale);
    const float inverse = __frcp_rn(token_scale);
    if (threadIdx.x == 0) scale[blockIdx.x] = token_scale;
    for (int i = threadIdx.x; i < hidden_size; i += stride) {
      y[i] = __nv_cvt_float_to_fp8(scaled(__bfloat162float(x[i]), token_scale, inverse),
                                   __NV_SATFINITE, __NV_E4M3);
    }
    return;
  }

  const int num_vectors = hidden_size / kVectorElems;
  const uint4* x_vectors = reinterpret_cast<const uint4*>(x);
  uint2* y_vectors = reinterpret_cast<uint2*>(y);

  // Pass 1: load the row into registers (consecutive threads on consecutive 16-byte chunks)
  // and take the abs-max.
  uint4 cached[kCachedVectors];
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < kCachedVectors; ++i) {
    const int v = threadIdx.x + i * stride;
    if (v < num_vectors) {
      cached[i] = x_vectors[v];
      amax = vector_abs_max(cached[i], amax);
    }
  }
  for (int v = threadIdx.x + kCachedVectors * stride; v < num_vectors; v += stride) {
    amax = vector_abs_max(x_vectors[v], amax);
  }

  const float token_scale = fmaxf(block_max(amax) / kFp8Max, kMinScale);
  const float inverse = __frcp_rn(token_scale);
  if (threadIdx.x == 0) {
    scale[blockIdx.x] = token_scale;
  }

  // Pass 2: quantize from registers, 8 bytes per store.
#pragma unroll
  for (int i = 0; i < kCachedVectors; ++i) {
    const int v = threadIdx.x + i * stride;
    if (v < num_vectors) y_vectors[v] = quantize(cached[i], token_scale, inverse);
  }
  for (int v = threadIdx.x + kCachedVectors * stride; v < num_vectors; v += stride) {
    y_vectors[v] = quantize(x_vectors[v], token_scale, inverse);
  }
}
