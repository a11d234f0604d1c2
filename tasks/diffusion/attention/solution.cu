// A correct, deliberately simple solution for diffusion/attention: plain fp32 arithmetic on the
// CUDA cores, no tensor cores. A block of 128 threads takes 64 query rows of one (sample, head),
// two threads a row (each owns 64 of the 128 dimensions of the query and of the output), and
// walks the keys in tiles of 32 staged in shared memory as fp32, with a softmax rescaled per
// tile (online softmax).
//
// Far slower than the reference (no tensor cores, every key read from shared memory by each
// pair of threads), but right on every shape: any sequence length, head count and batch.
//
// clang-format off
// @launch attention_simple<<<dim3(cdiv(seq_len, 64), num_heads, batch), 128>>>(out, query, key, value, scale, seq_len, num_heads)
// clang-format on

#include <cuda_bf16.h>

namespace {

constexpr int kHeadDim = 128;
constexpr int kHalf = kHeadDim / 2;  // dimensions per thread
constexpr int kRows = 64;            // query rows per block
constexpr int kTile = 32;            // keys per shared-memory tile
constexpr int kThreads = 2 * kRows;

__device__ float negative_infinity() { return __int_as_float(0xff800000); }

}  // namespace

extern "C" __global__ void __launch_bounds__(kThreads)
    attention_simple(__nv_bfloat16* out, const __nv_bfloat16* query, const __nv_bfloat16* key,
                     const __nv_bfloat16* value, float scale, int seq_len, int num_heads) {
  __shared__ __align__(16) float keys[kTile][kHeadDim];
  __shared__ __align__(16) float values[kTile][kHeadDim];

  const long long row_stride = static_cast<long long>(num_heads) * kHeadDim;
  const long long head_offset =
      (static_cast<long long>(blockIdx.z) * seq_len * num_heads + blockIdx.y) * kHeadDim;
  const int row = static_cast<int>(blockIdx.x) * kRows + static_cast<int>(threadIdx.x) / 2;
  const int half = static_cast<int>(threadIdx.x) % 2;  // partner thread: threadIdx.x ^ 1
  const int d0 = half * kHalf;

  // This thread's half of the query row, pre-multiplied by the scale (zeros past the end).
  float q[kHalf];
  for (int d = 0; d < kHalf; ++d) {
    q[d] = row < seq_len ? scale * __bfloat162float(query[head_offset + row * row_stride + d0 + d])
                         : 0.0f;
  }
  float o[kHalf];
  for (int d = 0; d < kHalf; ++d) o[d] = 0.0f;
  float running_max = negative_infinity();
  float running_sum = 0.0f;

  for (int t0 = 0; t0 < seq_len; t0 += kTile) {
    // Stage the tile's keys and values as fp32; rows past the end are zeros.
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
    float scores[kTile];
    float tile_max = negative_infinity();
#pragma unroll
    for (int j = 0; j < kTile; ++j) {
      float partial = 0.0f;
#pragma unroll
      for (int d = 0; d < kHalf; d += 4) {
        const float4 k4 = *reinterpret_cast<const float4*>(&keys[j][d0 + d]);
        partial += q[d] * k4.x + q[d + 1] * k4.y + q[d + 2] * k4.z + q[d + 3] * k4.w;
      }
      const float score = partial + __shfl_xor_sync(0xffffffffu, partial, 1);
      scores[j] = j < count ? score : negative_infinity();
      tile_max = fmaxf(tile_max, scores[j]);
    }
    const float new_max = fmaxf(running_max, tile_max);  // finite: key t0 is inside
    const float rescale = expf(running_max - new_max);   // 0 on the first tile
    running_sum *= rescale;
    for (int d = 0; d < kHalf; ++d) o[d] *= rescale;
#pragma unroll
    for (int j = 0; j < kTile; ++j) {
      const float p = expf(scores[j] - new_max);  // 0 for keys past the end
      running_sum += p;
#pragma unroll
      for (int d = 0; d < kHalf; d += 4) {
        const float4 v4 = *reinterpret_cast<const float4*>(&values[j][d0 + d]);
        o[d] += p * v4.x;
        o[d + 1] += p * v4.y;
        o[d + 2] += p * v4.z;
        o[d + 3] += p * v4.w;
      }
    }
    running_max = new_max;
    __syncthreads();  // the tile is rewritten by the next iteration
  }

  if (row < seq_len) {
    for (int d = 0; d < kHalf; ++d) {
      out[head_offset + row * row_stride + d0 + d] = __float2bfloat16(o[d] / running_sum);
    }
  }
}
