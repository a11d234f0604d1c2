// Reference for llm/fused_add_rms_norm_static_fp8_quant: vLLM's
// fused_add_rms_norm_static_fp8_quant(result, input, residual, weight, scale, epsilon) on bf16
// in, e4m3 out, fp32 math.
//
// For every token t:
//
//   r = bf16(input[t, :] + residual[t, :])                      stored to residual[t, :]
//   result[t, :] = e4m3_satfinite_rn(clamp(r * rsqrt(mean(r^2) + epsilon) * weight[:]
//                                          * (1 / scale[0]), -448, 448))
//
// The sum is formed in fp32 and rounded to bf16 once, as vLLM stores it; the sum of squares is
// taken over the rounded values. The normalised product stays in fp32 up to the e4m3 rounding
// (vLLM rounds it to bf16 twice on the way; the difference is within the task's one-step
// tolerance); the scale is applied as a product with its reciprocal, as vLLM does.
//
// Launch plan: one block per token, sized so that each thread owns at most four 16-byte
// vectors of the row (8 bf16 each): cdiv(hidden_size, 1024) warps, at least 4 and at most 32
// (128 threads for 3584 and 4096, 256 for 8192). Rows wider than 32768 elements still work: the
// part beyond the register cache is re-read in the second pass.
//
// clang-format off
// @launch fused_add_rms_norm_static_fp8_quant_kernel<<<num_tokens, min(1024, max(128, cdiv(hidden_size, 1024) * 32))>>>(result, input, residual, weight, scale, epsilon, hidden_size)
// clang-format on
//
// Design notes:
// - Memory bound: 6 FLOPs per 9 bytes moved. The row of sums stays in registers between the
//   sum of squares and the scaling, so the second pass reads nothing from memory: input,
//   residual and the weight (shared by all rows through L2) are all loaded before the first
//   store, one memory round trip, and the scale with them.
// - Each element of residual is read and written by the same thread, so the in-place update
//   needs no synchronisation beyond the one barrier of the block sum.
// - Rows whose width is not a multiple of 8 are not aligned for vectors; they take an
//   element-wise path that re-reads the stored residual in the second pass (from L1/L2).
// - result rows are written 8 e4m3 (8 bytes) a store, converted two at a time with the sm_89+
//   cvt.rn.satfinite.e4m3x2.f32 instruction.

#include <cuda_bf16.h>
#include <cuda_fp8.h>

namespace {

// bf16 elements per 16-byte vector.
constexpr int kVectorElems = 8;
// Vectors each thread keeps in registers between the two passes.
constexpr int kCachedVectors = 4;
// Largest block the launch directive asks for.
constexpr int kMaxThreads = 1024;
// Largest finite e4m3 (e4m3fn).
constexpr float kFp8Max = 448.0f;

__device__ __forceinline__ float warp_sum(float value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  return value;
}

// Sum of `value` over the block, returned to every thread. blockDim.x must be a multiple of 32.
// Called once per kernel: the shared partial sums are not protected against reuse.
__device__ __forceinline__ float block_sum(float value) {
  __shared__ float warp_sums[32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  value = warp_sum(value);
  if (lane == 0) warp_sums[warp] = value;
  __syncthreads();
  const int num_warps = blockDim.x >> 5;
  return warp_sum(lane < num_warps ? warp_sums[lane] : 0.0f);
}

// The 8 sums x + r, each added in fp32 and rounded once to bf16; adds the squares of the
// rounded values to `sum_sq`.
__device__ __forceinline__ uint4 add_rows(const uint4 x, const uint4 r, float& sum_sq) {
  const __nv_bfloat162* x_pairs = reinterpret_cast<const __nv_bfloat162*>(&x);
  const __nv_bfloat162* r_pairs = reinterpret_cast<const __nv_bfloat162*>(&r);
  uint4 sums;
  __nv_bfloat162* s_pairs = reinterpret_cast<__nv_bfloat162*>(&sums);
#pragma unroll
  for (int i = 0; i < kVectorElems / 2; ++i) {
    const float2 xv = __bfloat1622float2(x_pairs[i]);
    const float2 rv = __bfloat1622float2(r_pairs[i]);
    s_pairs[i] = __floats2bfloat162_rn(xv.x + rv.x, xv.y + rv.y);
    const float2 sv = __bfloat1622float2(s_pairs[i]);
    sum_sq += sv.x * sv.x + sv.y * sv.y;
  }
  return sums;
}

__device__ __forceinline__ float clamped(float y) { return fminf(fmaxf(y, -kFp8Max), kFp8Max); }

// e4m3(s * factor * w) for 8 elements, element 0 in the lowest byte; factor = inv_rms / scale.
__device__ __forceinline__ uint2 normalize_quantize(const uint4 s, const uint4 w, float factor) {
  const __nv_bfloat162* s_pairs = reinterpret_cast<const __nv_bfloat162*>(&s);
  const __nv_bfloat162* w_pairs = reinterpret_cast<const __nv_bfloat162*>(&w);
  unsigned int packed[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const float2 s0 = __bfloat1622float2(s_pairs[2 * half]);
    const float2 w0 = __bfloat1622float2(w_pairs[2 * half]);
    const float2 s1 = __bfloat1622float2(s_pairs[2 * half + 1]);
    const float2 w1 = __bfloat1622float2(w_pairs[2 * half + 1]);
    // __nv_cvt_float2_to_fp8x2 puts .x in the low byte.
    const unsigned int low = __nv_cvt_float2_to_fp8x2(
        make_float2(clamped(s0.x * factor * w0.x), clamped(s0.y * factor * w0.y)), __NV_SATFINITE,
        __NV_E4M3);
    const unsigned int high = __nv_cvt_float2_to_fp8x2(
        make_float2(clamped(s1.x * factor * w1.x), clamped(s1.y * factor * w1.y)), __NV_SATFINITE,
        __NV_E4M3);
    packed[half] = low | (high << 16);
  }
  return make_uint2(packed[0], packed[1]);
}

}  // namespace

// result: [num_tokens, hidden_size] e4m3; input: [num_tokens, hidden_size] bf16 (read);
// residual: [num_tokens, hidden_size] bf16 (updated in place); weight: [hidden_size]; scale: [1].
extern "C" __global__ void __launch_bounds__(kMaxThreads)
    fused_add_rms_norm_static_fp8_quant_kernel(__nv_fp8_e4m3* __restrict__ result,
                                               const __nv_bfloat16* __restrict__ input,
                                               __nv_bfloat16* __restrict__ residual,
                                               const __nv_bfloat16* __restrict__ weight,
                                               const float* __restrict__ scale, float epsilon,
                                               int hidden_size) {
  const size_t row_offset = static_cast<size_t>(blockIdx.x) * static_cast<size_t>(hidden_size);
  const __nv_bfloat16* x = input + row_offset;
  __nv_bfloat16* r = residual + row_offset;
  __nv_fp8_storage_t* y = reinterpret_cast<__nv_fp8_storage_t*>(result) + row_offset;
  const int stride = blockDim.x;
  const float inverse_scale = __frcp_rn(*scale);

  if (hidden_size % kVectorElems != 0) {
    // Element-wise path for rows that are not whole, aligned vectors. The branch is uniform
    // across the block, so every thread reaches the barrier inside block_sum.
    float sum_sq = 0.0f;
    for (int i = threadIdx.x; i < hidden_size; i += stride) {
      const __nv_bfloat16 s = __float2bfloat16_rn(__bfloat162float(x[i]) + __bfloat162float(r[i]));
      r[i] = s;
      const float v = __bfloat162float(s);
      sum_sq += v * v;
    }
    const float inv_rms = rsqrtf(block_sum(sum_sq) / static_cast<float>(hidden_size) + epsilon);
    const float factor = inv_rms * inverse_scale;
    // Each thread re-reads only the elements it stored itself.
    for (int i = threadIdx.x; i < hidden_size; i += stride) {
      y[i] = __nv_cvt_float_to_fp8(
          clamped(__bfloat162float(r[i]) * factor * __bfloat162float(weight[i])), __NV_SATFINITE,
          __NV_E4M3);
    }
    return;
  }

  const int num_vectors = hidden_size / kVectorElems;
  const uint4* x_vectors = reinterpret_cast<const uint4*>(x);
  uint4* r_vectors = reinterpret_cast<uint4*>(r);
  const uint4* w_vectors = reinterpret_cast<const uint4*>(weight);
  uint2* y_vectors = reinterpret_cast<uint2*>(y);

  // Pass 1: every load of the cached part before the first store (a store to residual between
  // loads would serialise them: the compiler cannot tell the addresses apart), then add, store
  // the rounded sums and accumulate their squares.
  uint4 cached[kCachedVectors];
  uint4 cached_residual[kCachedVectors];
  uint4 cached_weight[kCachedVectors];
#pragma unroll
  for (int i = 0; i < kCachedVectors; ++i) {
    const int v = threadIdx.x + i * stride;
    if (v < num_vectors) {
      cached[i] = x_vectors[v];
      cached_residual[i] = r_vectors[v];
      cached_weight[i] = w_vectors[v];
    }
  }
  float sum_sq = 0.0f;
#pragma unroll
  for (int i = 0; i < kCachedVectors; ++i) {
    const int v = threadIdx.x + i * stride;
    if (v < num_vectors) {
      cached[i] = add_rows(cached[i], cached_residual[i], sum_sq);
      r_vectors[v] = cached[i];
    }
  }
  for (int v = threadIdx.x + kCachedVectors * stride; v < num_vectors; v += stride) {
    r_vectors[v] = add_rows(x_vectors[v], r_vectors[v], sum_sq);
  }

  const float inv_rms = rsqrtf(block_sum(sum_sq) / static_cast<float>(hidden_size) + epsilon);
  const float factor = inv_rms * inverse_scale;

  // Pass 2: normalise, weight, scale and quantize, 8 bytes a store.
#pragma unroll
  for (int i = 0; i < kCachedVectors; ++i) {
    const int v = threadIdx.x + i * stride;
    if (v < num_vectors) y_vectors[v] = normalize_quantize(cached[i], cached_weight[i], factor);
  }
  for (int v = threadIdx.x + kCachedVectors * stride; v < num_vectors; v += stride) {
    y_vectors[v] = normalize_quantize(r_vectors[v], w_vectors[v], factor);
  }
}
