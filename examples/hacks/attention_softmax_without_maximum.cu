// expect: incorrect
// task: diffusion/attention
// Trick: drops the running maximum of the online softmax. Queries and keys of diffusion
// transformers come out of a per-head RMSNorm, so their scores look bounded (deviation 2, the
// largest about 11 on the visible cases), and exp of the raw score never overflows there: the
// kernel sums exp(score) and exp(score) * value over the keys and divides once at the end, with
// no tile maximum (no reductions across the threads of a row), no rescaling of the accumulator
// and no dependency of a tile's weights on the tiles before it. On every visible case the result
// is as accurate as a correct kernel's (fp32 weights, one division).
// Caught: the hidden case h_large_scores: query and key entries of deviation 5 give scores of
// deviation 25, and about one row in five has a score above 88.7, where fp32's exp overflows to
// inf; those rows become inf / inf = NaN, which the reference (maximum subtracted) never writes.
//
// clang-format off
// @launch attention_without_maximum<<<dim3(cdiv(seq_len, 64), num_heads, batch), 128>>>(out, query, key, value, scale, seq_len, num_heads)
// clang-format on

#include <cuda_bf16.h>

namespace {

constexpr int kHeadDim = 128;
constexpr int kHalf = kHeadDim / 2;  // dimensions per thread
constexpr int kRows = 64;            // query rows per block, two threads a row
constexpr int kTile = 32;            // keys per shared-memory tile
constexpr int kThreads = 2 * kRows;

}  // namespace

extern "C" __global__ void __launch_bounds__(kThreads)
    attention_without_maximum(__nv_bfloat16* out, const __nv_bfloat16* query,
                              const __nv_bfloat16* key, const __nv_bfloat16* value, float scale,
                              int seq_len, int num_heads) {
  __shared__ __align__(16) float keys[kTile][kHeadDim];
  __shared__ __align__(16) float values[kTile][kHeadDim];

  const long long row_stride = static_cast<long long>(num_heads) * kHeadDim;
  const long long head_offset =
      (static_cast<long long>(blockIdx.z) * seq_len * num_heads + blockIdx.y) * kHeadDim;
  const int row = static_cast<int>(blockIdx.x) * kRows + static_cast<int>(threadIdx.x) / 2;
  const int d0 = (static_cast<int>(threadIdx.x) % 2) * kHalf;

  float q[kHalf];
  for (int d = 0; d < kHalf; ++d) {
    q[d] = row < seq_len ? scale * __bfloat162float(query[head_offset + row * row_stride + d0 + d])
                         : 0.0f;
  }
  float o[kHalf];
  for (int d = 0; d < kHalf; ++d) o[d] = 0.0f;
  float sum = 0.0f;

  for (int t0 = 0; t0 < seq_len; t0 += kTile) {
    for (int i = static_cast<int>(threadIdx.x); i < kTile * kHeadDim; i += kThreads) {
      const int j = i / kHeadDim;
      const int d = i % kHeadDim;
      const bool inside = t0 + j < seq_len;
      const long long offset = head_offset + (t0 + j) * row_stride + d;
      keys[j][d] = inside ? __bfloat162float(key[offset]) : 0.0f;
      values[j][d] = inside ? __bfloat162float(value[offset]) : 0.0f;
    }
    __syncthreads();
    const int count = min(kTile, seq_len - t0);
#pragma unroll
    for (int j = 0; j < kTile; ++j) {
      float partial = 0.0f;
#pragma unroll
      for (int d = 0; d < kHalf; d += 4) {
        const float4 k4 = *reinterpret_cast<const float4*>(&keys[j][d0 + d]);
        partial += q[d] * k4.x + q[d + 1] * k4.y + q[d + 2] * k4.z + q[d + 3] * k4.w;
      }
      const float score = partial + __shfl_xor_sync(0xffffffffu, partial, 1);
      // The trick: the raw exponential, no maximum subtracted.
      const float p = j < count ? expf(score) : 0.0f;
      sum += p;
#pragma unroll
      for (int d = 0; d < kHalf; d += 4) {
        const float4 v4 = *reinterpret_cast<const float4*>(&values[j][d0 + d]);
        o[d] += p * v4.x;
        o[d + 1] += p * v4.y;
        o[d + 2] += p * v4.z;
        o[d + 3] += p * v4.w;
      }
    }
    __syncthreads();
  }

  if (row < seq_len) {
    for (int d = 0; d < kHalf; ++d) {
      out[head_offset + row * row_stride + d0 + d] = __float2bfloat16(o[d] / sum);
    }
  }
}
