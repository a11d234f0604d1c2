// Reference for llm/fused_add_rms_norm: vLLM's fused_add_rms_norm(input, residual, weight,
// epsilon) on bf16, in place, fp32 math.
//
// For every token t:
//
//   r = bf16(input[t, :] + residual[t, :])          stored to residual[t, :]
//   input[t, :] = r * rsqrt(mean(r^2) + epsilon) * weight[:]
//
// The sum is formed in fp32 and rounded to bf16 once, as vLLM stores it; the sum of squares is
// taken over the rounded values (what the next layer sees). The normalised product is formed in
// fp32 and rounded once to bf16 (vLLM rounds x * rsqrt to bf16 before the weight multiply; the
// difference is within the task's tolerance).
//
// Launch plan: one block per token. The block is sized so that each thread owns at most four
// 16-byte vectors of the row (8 bf16 each): cdiv(hidden_size, 1024) warps, at least 4 and at
// most 32 (128 threads for 3584 and 4096, 224 for 7168). Rows wider than 32768 elements still
// work: the part beyond the register cache is re-read in the second pass.
//
// clang-format off
// @launch fused_add_rms_norm_kernel<<<num_tokens, min(1024, max(128, cdiv(hidden_size, 1024) * 32))>>>(input, residual, weight, epsilon, hidden_size)
// clang-format on
//
// Design notes:
// - Memory bound: 5 FLOPs per 10 bytes moved. The floor is reading input, residual and weight
//   once and writing input and residual once. The row of sums stays in registers between the
//   sum of squares and the scaling, so the second pass reads only the weight (which 132 SMs
//   share through L2).
// - Each element is read and written by the same thread in both passes, so updating input and
//   residual in place needs no synchronisation beyond the one barrier of the block sum.
// - Rows whose width is not a multiple of 8 are not 16-byte aligned (buffers are 256-byte
//   aligned, so row t starts at byte 2 * t * hidden_size); they take an element-wise path that
//   re-reads the stored residual in the second pass (from L2: the row was just written).
// - Decode (1 to 256 tokens) runs one block per token: a 4096-wide row is 8 KiB per tensor, and
//   launch latency and one round trip to memory dominate, not the reduction.

#include <cuda_bf16.h>

namespace {

// bf16 elements per 16-byte vector.
constexpr int kVectorElems = 8;
// Vectors each thread keeps in registers between the two passes (the launch sizes the block so
// that every row of the task fits).
constexpr int kCachedVectors = 4;
// Largest block the launch directive asks for.
constexpr int kMaxThreads = 1024;

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

// The 8 sums x + r, each added in fp32 and rounded once to bf16; adds their squares (of the
// rounded values) to `sum_sq`.
__device__ __forceinline__ uint4 add_rows(const uint4 x, const uint4 r, float& sum_sq) {
  const __nv_bfloat162* x_pairs = reinterpret_cast<const __nv_bfloat162*>(&x);
  const __nv_bfloat162* r_pairs = reinterpret_cast<const __nv_bfloat162*>(&r);
  uint4 result;
  __nv_bfloat162* s_pairs = reinterpret_cast<__nv_bfloat162*>(&result);
#pragma unroll
  for (int i = 0; i < kVectorElems / 2; ++i) {
    const float2 xv = __bfloat1622float2(x_pairs[i]);
    const float2 rv = __bfloat1622float2(r_pairs[i]);
    s_pairs[i] = __floats2bfloat162_rn(xv.x + rv.x, xv.y + rv.y);
    const float2 sv = __bfloat1622float2(s_pairs[i]);
    sum_sq += sv.x * sv.x + sv.y * sv.y;
  }
  return result;
}

// s * inv_rms * w for 8 elements, rounded once to bf16.
__device__ __forceinline__ uint4 normalize(const uint4 s, const uint4 w, float inv_rms) {
  const __nv_bfloat162* s_pairs = reinterpret_cast<const __nv_bfloat162*>(&s);
  const __nv_bfloat162* w_pairs = reinterpret_cast<const __nv_bfloat162*>(&w);
  uint4 result;
  __nv_bfloat162* out_pairs = reinterpret_cast<__nv_bfloat162*>(&result);
#pragma unroll
  for (int i = 0; i < kVectorElems / 2; ++i) {
    const float2 sv = __bfloat1622float2(s_pairs[i]);
    const float2 wv = __bfloat1622float2(w_pairs[i]);
    out_pairs[i] = __floats2bfloat162_rn(sv.x * inv_rms * wv.x, sv.y * inv_rms * wv.y);
  }
  return result;
}

}  // namespace

// input, residual: [num_tokens, hidden_size] row-major, both updated in place; weight:
// [hidden_size].
extern "C" __global__ void __launch_bounds__(kMaxThreads)
    fused_add_rms_norm_kernel(__nv_bfloat16* __restrict__ input,
                              __nv_bfloat16* __restrict__ residual,
                              const __nv_bfloat16* __restrict__ weight, float epsilon,
                              int hidden_size) {
  const size_t row_offset = static_cast<size_t>(blockIdx.x) * static_cast<size_t>(hidden_size);
  __nv_bfloat16* x = input + row_offset;
  __nv_bfloat16* r = residual + row_offset;
  const int stride = blockDim.x;

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
    // Each thread re-reads only the elements it stored itself.
    for (int i = threadIdx.x; i < hidden_size; i += stride) {
      x[i] = __float2bfloat16_rn(__bfloat162float(r[i]) * inv_rms * __bfloat162float(weight[i]));
    }
    return;
  }

  const int num_vectors = hidden_size / kVectorElems;
  uint4* x_vectors = reinterpret_cast<uint4*>(x);
  uint4* r_vectors = reinterpret_cast<uint4*>(r);
  const uint4* w_vectors = reinterpret_cast<const uint4*>(weight);

  // Pass 1: add, store the rounded sums to residual, keep them in registers, and accumulate
  // their squares. Thread t handles vectors t, t + stride, ... so consecutive threads touch
  // consecutive 16-byte chunks (coalesced). Every load of the cached part (input, residual and weight) is issued before the first
  // store: a store to residual between the loads would keep the next load from issuing before
  // it (the compiler cannot tell the addresses apart), turning one memory round trip into
  // kCachedVectors of them, and the weight loaded after the reduction would add another.
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
    const uint4 s = add_rows(x_vectors[v], r_vectors[v], sum_sq);
    r_vectors[v] = s;
  }

  const float inv_rms = rsqrtf(block_sum(sum_sq) / static_cast<float>(hidden_size) + epsilon);

  // Pass 2: scale the sums by 1/rms and the weight into input, 16 bytes at a time.
#pragma unroll
  for (int i = 0; i < kCachedVectors; ++i) {
    const int v = threadIdx.x + i * stride;
    if (v < num_vectors) x_vectors[v] = normalize(cached[i], cached_weight[i], inv_rms);
  }
  for (int v = threadIdx.x + kCachedVectors * stride; v < num_vectors; v += stride) {
    x_vectors[v] = normalize(r_vectors[v], w_vectors[v], inv_rms);
  }
}
