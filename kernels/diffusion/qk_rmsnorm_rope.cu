// Reference for diffusion/qk_rmsnorm_rope: FLUX.1's per-head RMSNorm of the query and the key
// followed by the interleaved rotary embedding, both in place, on bf16 with fp32 math.
//
// For every row (one head of one token) of query (weight q_weight) and of key (k_weight), with
// D = head_dim, s the token's position in its sequence and k < D / 2:
//   n[i] = x[i] * rsqrt(mean_j x[j]^2 + epsilon) * weight[i]
//   c = cos_sin[s, k],  t = cos_sin[s, D / 2 + k]
//   x[2k]     <- n[2k] * c - n[2k + 1] * t
//   x[2k + 1] <- n[2k + 1] * c + n[2k] * t
// rounded once to bf16.
//
// Launch plan: the query rows and then the key rows form one list of 2 * batch * seq_len *
// num_heads rows; a warp takes 4 consecutive rows, a block of 8 warps 32 rows.
//
// @launch qk_rmsnorm_rope_kernel<<<cdiv(2 * batch * seq_len * num_heads, 32), 256>>>(query, key,
//             q_weight, k_weight, cos_sin, epsilon, batch, seq_len, num_heads, head_dim)
//
// Design notes:
// - Memory bound: each row is read once and written once (256 bytes at D = 128); the weights
//   and the cos/sin row of a token are shared by its 2 * num_heads rows and come from L1/L2.
// - One warp normalises a row with a shuffle reduction, no shared memory, no barriers. A lane
//   holds 4 consecutive elements (two rotation pairs, one 8-byte load) when D % 4 == 0, else
//   2 (one pair, one 4-byte load).
// - A warp issues the loads of its 4 rows before the first reduction: 1 KiB in flight per warp,
//   64 KiB per SM at full occupancy, which is what HBM latency times bandwidth asks for (one
//   row per warp at a time reaches about a quarter of that).

#include <cuda_bf16.h>

namespace {

constexpr int kThreads = 256;    // must equal the block size of the directive
constexpr int kRowsPerWarp = 4;  // kThreads / 32 * kRowsPerWarp = 32 rows a block, as launched
constexpr int kMaxHeadDim = 256;

template <int kElems>
struct Item;  // kElems consecutive bf16 of a row, loaded as one word
template <>
struct Item<4> {
  using Bits = uint2;
};
template <>
struct Item<2> {
  using Bits = unsigned int;
};

__device__ __forceinline__ float warp_sum(float value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  return value;
}

// Normalises and rotates rows first_row .. first_row + kRowsPerWarp - 1 of the joined list.
template <int kElems>
__device__ __forceinline__ void norm_rope_rows(
    __nv_bfloat16* __restrict__ query, __nv_bfloat16* __restrict__ key,
    const __nv_bfloat16* __restrict__ q_weight, const __nv_bfloat16* __restrict__ k_weight,
    const float* __restrict__ cos_sin, float epsilon, long long q_rows, int seq_len,
    int num_heads, int head_dim, long long first_row) {
  using Bits = typename Item<kElems>::Bits;
  constexpr int kPairs = kElems / 2;
  constexpr int kMaxItems = kMaxHeadDim / kElems / 32;
  const int lane = threadIdx.x & 31;
  const int items = head_dim / kElems;
  const int half = head_dim / 2;

  Bits x[kRowsPerWarp][kMaxItems];
  __nv_bfloat16* row_ptr[kRowsPerWarp];
  const __nv_bfloat16* weight[kRowsPerWarp];
  const float* table[kRowsPerWarp];
  bool valid[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const long long row = first_row + r;
    valid[r] = row < 2 * q_rows;  // uniform across the warp
    if (!valid[r]) continue;
    const bool is_key = row >= q_rows;
    const long long local = is_key ? row - q_rows : row;
    row_ptr[r] = (is_key ? key : query) + local * head_dim;
    weight[r] = is_key ? k_weight : q_weight;
    const long long token = local / num_heads;  // b * seq_len + s
    table[r] = cos_sin + (token % seq_len) * head_dim;
#pragma unroll
    for (int j = 0; j < kMaxItems; ++j) {
      const int item = lane + 32 * j;
      if (item < items) x[r][j] = *reinterpret_cast<const Bits*>(row_ptr[r] + item * kElems);
    }
  }

#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    if (!valid[r]) continue;
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxItems; ++j) {
      if (lane + 32 * j >= items) continue;
      const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&x[r][j]);
#pragma unroll
      for (int k = 0; k < kPairs; ++k) {
        const float2 f = __bfloat1622float2(p[k]);
        sum += f.x * f.x + f.y * f.y;
      }
    }
    const float inv_rms = rsqrtf(warp_sum(sum) / static_cast<float>(head_dim) + epsilon);
#pragma unroll
    for (int j = 0; j < kMaxItems; ++j) {
      const int item = lane + 32 * j;
      if (item >= items) continue;
      const Bits w_bits = *reinterpret_cast<const Bits*>(weight[r] + item * kElems);
      const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&x[r][j]);
      const __nv_bfloat162* w = reinterpret_cast<const __nv_bfloat162*>(&w_bits);
      Bits result;
      __nv_bfloat162* out = reinterpret_cast<__nv_bfloat162*>(&result);
#pragma unroll
      for (int k = 0; k < kPairs; ++k) {
        const int pair = item * kPairs + k;
        const float c = table[r][pair];
        const float t = table[r][half + pair];
        const float2 f = __bfloat1622float2(p[k]);
        const float2 wf = __bfloat1622float2(w[k]);
        const float a = f.x * inv_rms * wf.x;
        const float b = f.y * inv_rms * wf.y;
        out[k] = __floats2bfloat162_rn(a * c - b * t, b * c + a * t);
      }
      *reinterpret_cast<Bits*>(row_ptr[r] + item * kElems) = result;
    }
  }
}

}  // namespace

// query, key: [batch, seq_len, num_heads, head_dim] bf16, updated in place; q_weight, k_weight:
// [head_dim] bf16; cos_sin: [seq_len, head_dim] fp32 (cosines of the D / 2 angles, then sines).
extern "C" __global__ void __launch_bounds__(kThreads)
    qk_rmsnorm_rope_kernel(__nv_bfloat16* __restrict__ query, __nv_bfloat16* __restrict__ key,
                           const __nv_bfloat16* __restrict__ q_weight,
                           const __nv_bfloat16* __restrict__ k_weight,
                           const float* __restrict__ cos_sin, float epsilon, int batch,
                           int seq_len, int num_heads, int head_dim) {
  const long long q_rows = static_cast<long long>(batch) * seq_len * num_heads;
  const long long first_row =
      (static_cast<long long>(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5)) * kRowsPerWarp;
  if (head_dim % 4 == 0) {
    norm_rope_rows<4>(query, key, q_weight, k_weight, cos_sin, epsilon, q_rows, seq_len,
                      num_heads, head_dim, first_row);
  } else {
    norm_rope_rows<2>(query, key, q_weight, k_weight, cos_sin, epsilon, q_rows, seq_len,
                      num_heads, head_dim, first_row);
  }
}
