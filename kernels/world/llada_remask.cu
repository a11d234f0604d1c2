// Reference for world/llada_remask: one low-confidence remasking step of LLaDA's sampler, as
// Fast-dLLM's get_transfer_index computes it on a block's logits, with the position noise given.
//
// For every row b and position l, masked when x[b, l] == mask_id:
//   x0[b, l]    = argmax_v logits[b, l, v] (the lowest such v) if masked, else x[b, l]
//   score[b, l] = logits[b, l, x0] - logsumexp_v logits[b, l, v] + noise[b, l]  (masked only)
//   transfer_index[b, l] = true for the min(num_transfer_tokens[b], masked count of row b)
//                          masked positions of highest score (ties: the lower l), else false.
//
// Launch plan: a split pass over the vocabulary, then one block per row that combines the
// splits, ranks the row's positions and writes both outputs.
//
// @workspace part_max float[batch * seq_len * cdiv(vocab, 8192)]
// @workspace part_sum float[batch * seq_len * cdiv(vocab, 8192)]
// @workspace part_arg int[batch * seq_len * cdiv(vocab, 8192)]
// @launch remask_split_stats<<<dim3(cdiv(vocab, 8192), batch * seq_len), 256>>>(part_max,
//   part_sum, part_arg, logits, x, mask_id, vocab)
// @launch remask_select<<<batch, 256, seq_len * 8>>>(x0, transfer_index, part_max, part_sum,
//   part_arg, x, noise, num_transfer_tokens, mask_id, seq_len, vocab)
//
// Design notes:
// - The op reads one vocabulary row (253 KB at LLaDA's 126464 tokens) per masked position and
//   nothing else of size, so it is bound by HBM bandwidth; unmasked rows are never read. A row
//   is cut into splits of 8192 tokens so that even one sequence of a 32-token block puts
//   hundreds of blocks on the GPU's 132 SMs.
// - A thread loads its 32 logits of a split as four 16-byte vectors into registers (in token
//   order, so a strict > keeps the lowest index among tied maxima), takes their maximum, then
//   sums exp(v - max) with exp2f on pre-scaled values; the block reduces (max, arg, sum) pairs
//   through shared memory, rescaling each sum to the larger maximum.
// - The select kernel merges the splits of each position (log-confidence = -log(sum) after
//   rescaling to the row maximum), keeps the scores in shared memory and ranks every masked
//   position against the row's others: rank = #{j: s_j > s_l or (s_j == s_l and j < l)}. Blocks
//   hold at most a few hundred positions, so the quadratic ranking is a few microseconds at most
//   and needs no sort.

#include <cuda_bf16.h>

namespace {

constexpr int kSplit = 8192;    // tokens per split (the directives' cdiv(vocab, 8192))
constexpr int kThreads = 256;   // the directives launch 256 threads
constexpr int kPerThread = kSplit / kThreads;  // 32 logits, four 16-byte vectors
constexpr float kLog2e = 1.4426950408889634f;
constexpr int kNoIndex = 0x7fffffff;  // a thread or warp that saw no token

__device__ __forceinline__ float negative_infinity() { return __int_as_float(0xff800000); }

__device__ __forceinline__ float bf16_bits_to_float(unsigned int bits16) {
  return __uint_as_float(bits16 << 16);
}

// Combines (m, s, a) into (m0, s0, a0): the larger maximum wins (the lower index on equal
// maxima), the other sum is rescaled to it.
__device__ __forceinline__ void merge_stats(float& m0, float& s0, int& a0, float m, float s,
                                            int a) {
  if (m > m0 || (m == m0 && a < a0)) {
    s0 = s + s0 * exp2f((m0 - m) * kLog2e);
    m0 = m;
    a0 = a;
  } else {
    s0 = s0 + s * exp2f((m - m0) * kLog2e);
  }
}

}  // namespace

extern "C" __global__ void __launch_bounds__(kThreads)
    remask_split_stats(float* __restrict__ part_max, float* __restrict__ part_sum,
                       int* __restrict__ part_arg, const __nv_bfloat16* __restrict__ logits,
                       const long long* __restrict__ x, long long mask_id, int vocab) {
  const int split = blockIdx.x;
  const long long row = blockIdx.y;
  if (x[row] != mask_id) return;  // block-uniform: the whole block leaves

  const int begin = split * kSplit;
  const int end = min(begin + kSplit, vocab);
  const unsigned short* src =
      reinterpret_cast<const unsigned short*>(logits) + row * static_cast<long long>(vocab);

  float v[kPerThread];
  float m = negative_infinity();
  int a = kNoIndex;
  // Rows start 16-byte aligned when vocab is a multiple of 8 (the buffer is 256-byte aligned).
  if ((vocab & 7) == 0) {
#pragma unroll
    for (int j = 0; j < kPerThread / 8; ++j) {
      const int first = begin + (j * kThreads + threadIdx.x) * 8;
      if (first < end) {
        const uint4 packed = __ldg(reinterpret_cast<const uint4*>(src + first));
        const unsigned int words[4] = {packed.x, packed.y, packed.z, packed.w};
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          v[j * 8 + 2 * w] = bf16_bits_to_float(words[w] & 0xffffu);
          v[j * 8 + 2 * w + 1] = bf16_bits_to_float(words[w] >> 16);
        }
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) v[j * 8 + e] = negative_infinity();
      }
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        if (v[j * 8 + e] > m) {
          m = v[j * 8 + e];
          a = first + e;
        }
      }
    }
  } else {
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int t = begin + j * kThreads + threadIdx.x;
      v[j] = t < end ? bf16_bits_to_float(src[t]) : negative_infinity();
      if (v[j] > m) {
        m = v[j];
        a = t;
      }
    }
  }
  float s = 0.0f;
  if (a != kNoIndex) {
    const float scaled_max = m * kLog2e;
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) s += exp2f(fmaf(v[j], kLog2e, -scaled_max));
  }

  // Warp, then block reduction of (max, sum, arg).
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, offset);
    const float s2 = __shfl_xor_sync(0xffffffffu, s, offset);
    const int a2 = __shfl_xor_sync(0xffffffffu, a, offset);
    if (a2 != kNoIndex) {
      if (a == kNoIndex) {
        m = m2, s = s2, a = a2;
      } else {
        merge_stats(m, s, a, m2, s2, a2);
      }
    }
  }
  __shared__ float warp_max[kThreads / 32];
  __shared__ float warp_sum[kThreads / 32];
  __shared__ int warp_arg[kThreads / 32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  if (lane == 0) {
    warp_max[warp] = m;
    warp_sum[warp] = s;
    warp_arg[warp] = a;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float m0 = warp_max[0], s0 = warp_sum[0];
    int a0 = warp_arg[0];
    for (int w = 1; w < kThreads / 32; ++w) {
      if (warp_arg[w] == kNoIndex) continue;
      if (a0 == kNoIndex) {
        m0 = warp_max[w], s0 = warp_sum[w], a0 = warp_arg[w];
      } else {
        merge_stats(m0, s0, a0, warp_max[w], warp_sum[w], warp_arg[w]);
      }
    }
    const long long slot = row * gridDim.x + split;
    part_max[slot] = m0;
    part_sum[slot] = s0;
    part_arg[slot] = a0;
  }
}

extern "C" __global__ void __launch_bounds__(kThreads)
    remask_select(long long* __restrict__ x0, signed char* __restrict__ transfer_index,
                  const float* __restrict__ part_max, const float* __restrict__ part_sum,
                  const int* __restrict__ part_arg, const long long* __restrict__ x,
                  const float* __restrict__ noise,
                  const long long* __restrict__ num_transfer_tokens,
                  long long mask_id, int seq_len, int vocab) {
  extern __shared__ float scores[];  // seq_len scores, then seq_len masked flags
  int* masked = reinterpret_cast<int*>(scores + seq_len);
  __shared__ int masked_count;
  const int b = blockIdx.x;
  const int splits = (vocab + kSplit - 1) / kSplit;
  if (threadIdx.x == 0) masked_count = 0;
  __syncthreads();

  int local_count = 0;
  for (int l = threadIdx.x; l < seq_len; l += kThreads) {
    const long long row = static_cast<long long>(b) * seq_len + l;
    const long long token = x[row];
    const bool is_masked = token == mask_id;
    masked[l] = is_masked ? 1 : 0;
    if (is_masked) {
      ++local_count;
      const long long base = row * splits;
      float m = part_max[base], s = part_sum[base];
      int a = part_arg[base];
      for (int p = 1; p < splits; ++p) {
        merge_stats(m, s, a, part_max[base + p], part_sum[base + p], part_arg[base + p]);
      }
      scores[l] = noise[row] - logf(s);
      x0[row] = a;
    } else {
      scores[l] = 0.0f;
      x0[row] = token;
    }
  }
  if (local_count > 0) atomicAdd(&masked_count, local_count);
  __syncthreads();

  const long long want = num_transfer_tokens[b];
  const long long k = want < masked_count ? want : masked_count;
  for (int l = threadIdx.x; l < seq_len; l += kThreads) {
    bool chosen = false;
    if (masked[l] != 0 && k > 0) {
      const float mine = scores[l];
      int rank = 0;
      for (int j = 0; j < seq_len; ++j) {
        const float other = scores[j];
        rank += (masked[j] != 0 && (other > mine || (other == mine && j < l))) ? 1 : 0;
      }
      chosen = rank < k;
    }
    transfer_index[static_cast<long long>(b) * seq_len + l] = chosen ? 1 : 0;
  }
}
