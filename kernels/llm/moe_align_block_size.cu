// Reference for llm/moe_align_block_size: vLLM's MoE token alignment. The flat indices
// i = token * topk + slot of topk_ids are grouped by expert, each expert's group padded with the
// value numel = num_tokens * topk to a multiple of block_size, so the grouped GEMM of the fused
// MoE layer can give each block of block_size rows to one expert.
//
//   c_e  = #{i : topk_ids[i] == e},  p_e = cdiv(c_e, block_size) * block_size
//   o_e  = p_0 + ... + p_{e-1},      total = o_{num_experts}
//   sorted_token_ids[o_e .. o_e + p_e): the i with topk_ids[i] == e (any order), then numel
//   sorted_token_ids[total ..]        : numel
//   experts_ids[b] = the e with o_e <= b * block_size < o_e + p_e, for b * block_size < total;
//                    0 for later blocks
//   num_tokens_post_pad[0] = total
//
// Launch plan (DESIGN.md section 2): up to 4096 flat indices (decode, short prefill), one block
// of 1024 threads does everything. Above that, two launches over up to 16 chunks of the
// indices: a histogram per chunk (while further blocks of the same launch pre-fill
// sorted_token_ids with the padding value), then per chunk the layout and the scatter.
//
// @workspace histogram int[16 * 1024]
// @launch if (num_tokens * topk <= 4096) moe_align_fused<<<1, 1024>>>(topk_ids, sorted_token_ids,
//   experts_ids, num_tokens_post_pad, num_tokens, topk, num_experts, block_size,
//   max_num_tokens_padded, max_num_m_blocks)
// @launch if (num_tokens * topk > 4096) moe_align_histogram<<<min(16, cdiv(num_tokens * topk,
//   2048)) + cdiv(max_num_tokens_padded, 8192), 1024>>>(topk_ids, sorted_token_ids, histogram,
//   num_tokens, topk, num_experts, max_num_tokens_padded)
// @launch if (num_tokens * topk > 4096) moe_align_scatter<<<min(16, cdiv(num_tokens * topk,
//   2048)), 1024>>>(topk_ids, sorted_token_ids, experts_ids, num_tokens_post_pad, histogram,
//   num_tokens, topk, num_experts, block_size, max_num_m_blocks)
//
// Design notes (why, for whoever optimises this next):
// - The op is latency bound: a few hundred kilobytes at most, dominated by launches and the
//   serial dependency count -> prefix sum -> scatter. Small inputs therefore run as one block
//   whose threads keep their indices (at most four) and their rank inside the expert in
//   registers between the phases, with only __syncthreads() between them.
// - Every thread issues all of its index loads before its first atomic, so a block waits for
//   global memory once, not once per index.
// - Ranks come from plain shared-memory atomics. With 128 and 256 experts a warp's 32 indices
//   fall on 20-30 distinct experts even under skewed routing, so few atomics collide, and a
//   per-warp aggregation (__match_any_sync) costs more than it saves.
// - The rank inside an expert's segment is whatever the atomics hand out. The op allows any
//   order inside a segment (the fused-MoE GEMM reads the indices, not their order), and so does
//   the task's checker; vLLM's own kernel is just as unordered.
// - Every position of sorted_token_ids is written exactly once in the fused kernel: a thread per
//   position finds its segment by binary search over the offsets (in shared memory) and writes
//   the padding value only where no index lands, so no ordering between writers is needed.
// - The large path splits the indices into at most 16 chunks. Each scatter block re-derives
//   the whole layout from the 16 x num_experts histogram (16 independent L2 loads per thread,
//   all in flight at once) instead of waiting for a separate one-block scan launch: the
//   redundant work is a few microseconds of one block's time spent in parallel, the saved
//   launch is a serial step. Its base for expert e is o_e plus the counts of e in the chunks
//   before its own, so the chunks' ranges never overlap and need no global atomics.

namespace {

constexpr int kMaxExperts = 1024;  // one scan slot per thread of a 1024-thread block
constexpr int kThreads = 1024;
constexpr int kFusedPerThread = 4;  // the fused kernel holds up to 4096 indices
constexpr int kMaxChunks = 16;      // chunks of the large path (the histogram's rows)
constexpr int kMinChunk = 2048;     // indices per chunk at least
constexpr int kFillPerBlock = 8192;  // padding positions per fill block of the histogram launch
constexpr int kTile = 4;             // indices per thread loaded before they are used

// Exclusive prefix sum over the block of one value per thread (1024 threads); also returns the
// block's total. `warp_sums` holds 32 ints of shared memory.
__device__ __forceinline__ int block_exclusive_scan(int value, int* warp_sums, int* total) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  int inclusive = value;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const int up = __shfl_up_sync(0xffffffffu, inclusive, offset);
    if (lane >= offset) inclusive += up;
  }
  if (lane == 31) warp_sums[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    int sum = warp_sums[lane];
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
      const int up = __shfl_up_sync(0xffffffffu, sum, offset);
      if (lane >= offset) sum += up;
    }
    warp_sums[lane] = sum;  // inclusive prefix of the warp totals
  }
  __syncthreads();
  *total = warp_sums[31];
  return inclusive - value + (warp > 0 ? warp_sums[warp - 1] : 0);
}

// The expert whose segment holds `position` (< offsets[num_experts]): the largest e with
// offsets[e] <= position. Empty experts share their offset with the next one and are skipped.
__device__ __forceinline__ int segment_of(const int* offsets, int num_experts, int position) {
  int lo = 0;
  int hi = num_experts;  // offsets[hi] > position
  while (hi - lo > 1) {
    const int mid = (lo + hi) >> 1;
    if (offsets[mid] <= position) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// From per-expert counts (one per thread, 0 past num_experts), lays out offsets[0..num_experts]
// in shared memory and returns this thread's expert offset. With `write_blocks`, also writes
// num_tokens_post_pad and experts_ids. Called by all 1024 threads of a block.
__device__ __forceinline__ int lay_out(int count, int* offsets, int* warp_sums,
                                       int* __restrict__ experts_ids,
                                       int* __restrict__ num_tokens_post_pad, int num_experts,
                                       int block_size, int max_num_m_blocks, bool write_blocks) {
  const int e = threadIdx.x;
  const int padded = (count + block_size - 1) / block_size * block_size;
  int total = 0;
  const int offset = block_exclusive_scan(padded, warp_sums, &total);
  if (e < num_experts) offsets[e] = offset;
  if (e == 0) offsets[num_experts] = total;
  __syncthreads();
  if (write_blocks) {
    if (e == 0) *num_tokens_post_pad = total;
    for (int b = threadIdx.x; b < max_num_m_blocks; b += blockDim.x) {
      const int start = b * block_size;
      experts_ids[b] = start < total ? segment_of(offsets, num_experts, start) : 0;
    }
  }
  return offset;
}

// The expert of flat index i, or -1 past the end (and for ids past the expert count, which
// vLLM skips).
__device__ __forceinline__ int expert_at(const int* __restrict__ topk_ids, int i, int numel,
                                         int num_experts) {
  if (i >= numel) return -1;
  const int e = __ldg(topk_ids + i);
  return e < num_experts ? e : -1;
}

// The large path's chunks: how many, and the flat indices of chunk g.
__device__ __forceinline__ int chunk_count(int numel) {
  return min(kMaxChunks, (numel + kMinChunk - 1) / kMinChunk);
}
__device__ __forceinline__ int chunk_length(int numel) {
  const int chunks = chunk_count(numel);
  return (numel + chunks - 1) / chunks;
}

}  // namespace

// Up to 4096 indices: count, lay out and scatter in one block.
extern "C" __global__ void __launch_bounds__(kThreads)
    moe_align_fused(const int* __restrict__ topk_ids, int* __restrict__ sorted_token_ids,
                    int* __restrict__ experts_ids, int* __restrict__ num_tokens_post_pad,
                    int num_tokens, int topk, int num_experts, int block_size,
                    int max_num_tokens_padded, int max_num_m_blocks) {
  __shared__ int counts[kMaxExperts];
  __shared__ int offsets[kMaxExperts + 1];
  __shared__ int warp_sums[32];
  const int numel = num_tokens * topk;
  int expert[kFusedPerThread];
#pragma unroll
  for (int j = 0; j < kFusedPerThread; ++j) {
    expert[j] = expert_at(topk_ids, threadIdx.x + j * kThreads, numel, num_experts);
  }
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x) counts[e] = 0;
  __syncthreads();
  int rank[kFusedPerThread];
#pragma unroll
  for (int j = 0; j < kFusedPerThread; ++j) {
    rank[j] = expert[j] >= 0 ? atomicAdd(&counts[expert[j]], 1) : 0;
  }
  __syncthreads();
  const int count = threadIdx.x < num_experts ? counts[threadIdx.x] : 0;
  lay_out(count, offsets, warp_sums, experts_ids, num_tokens_post_pad, num_experts, block_size,
          max_num_m_blocks, true);

  // Padding: positions past the total, and the tail of each segment beyond its count.
  const int total = offsets[num_experts];
  for (int p = threadIdx.x; p < max_num_tokens_padded; p += blockDim.x) {
    bool pad = p >= total;
    if (!pad) {
      const int e = segment_of(offsets, num_experts, p);
      pad = p - offsets[e] >= counts[e];
    }
    if (pad) sorted_token_ids[p] = numel;
  }
#pragma unroll
  for (int j = 0; j < kFusedPerThread; ++j) {
    if (expert[j] >= 0) {
      sorted_token_ids[offsets[expert[j]] + rank[j]] = threadIdx.x + j * kThreads;
    }
  }
}

// Large inputs, first launch. Blocks 0 .. chunks - 1 count the experts of their chunk into row
// g of histogram[chunks][num_experts]; the other blocks fill sorted_token_ids with the padding
// value (the scatter launch that follows overwrites the token positions).
extern "C" __global__ void __launch_bounds__(kThreads)
    moe_align_histogram(const int* __restrict__ topk_ids, int* __restrict__ sorted_token_ids,
                        int* __restrict__ histogram, int num_tokens, int topk, int num_experts,
                        int max_num_tokens_padded) {
  const int numel = num_tokens * topk;
  const int chunks = chunk_count(numel);
  if (static_cast<int>(blockIdx.x) >= chunks) {
    const int begin = (static_cast<int>(blockIdx.x) - chunks) * kFillPerBlock;
    const int end = min(begin + kFillPerBlock, max_num_tokens_padded);
    for (int p = begin + threadIdx.x; p < end; p += blockDim.x) sorted_token_ids[p] = numel;
    return;
  }
  __shared__ int counts[kMaxExperts];
  const int length = chunk_length(numel);
  const int begin = blockIdx.x * length;
  const int end = min(begin + length, numel);
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x) counts[e] = 0;
  __syncthreads();
  for (int base = begin; base < end; base += kTile * kThreads) {
    int expert[kTile];
#pragma unroll
    for (int j = 0; j < kTile; ++j) {
      expert[j] = expert_at(topk_ids, base + j * kThreads + threadIdx.x, end, num_experts);
    }
#pragma unroll
    for (int j = 0; j < kTile; ++j) {
      if (expert[j] >= 0) atomicAdd(&counts[expert[j]], 1);
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x) {
    histogram[blockIdx.x * num_experts + e] = counts[e];
  }
}

// Large inputs, second launch: block g derives the layout from the histogram (block 0 also
// writes num_tokens_post_pad and experts_ids), then scatters its chunk from per-expert cursors
// that start at o_e plus the counts of e in the chunks before g.
extern "C" __global__ void __launch_bounds__(kThreads)
    moe_align_scatter(const int* __restrict__ topk_ids, int* __restrict__ sorted_token_ids,
                      int* __restrict__ experts_ids, int* __restrict__ num_tokens_post_pad,
                      const int* __restrict__ histogram, int num_tokens, int topk,
                      int num_experts, int block_size, int max_num_m_blocks) {
  __shared__ int cursor[kMaxExperts];
  __shared__ int offsets[kMaxExperts + 1];
  __shared__ int warp_sums[32];
  const int numel = num_tokens * topk;
  const int chunks = chunk_count(numel);
  const int length = chunk_length(numel);
  const int begin = blockIdx.x * length;
  const int end = min(begin + length, numel);

  // The first tile of this chunk's indices, loaded while the histogram is read.
  int expert[kTile];
#pragma unroll
  for (int j = 0; j < kTile; ++j) {
    expert[j] = expert_at(topk_ids, begin + j * kThreads + threadIdx.x, end, num_experts);
  }
  const int e = threadIdx.x;
  int rows[kMaxChunks];
#pragma unroll
  for (int g = 0; g < kMaxChunks; ++g) {
    rows[g] = (g < chunks && e < num_experts) ? __ldg(histogram + g * num_experts + e) : 0;
  }
  int count = 0;
  int before = 0;
#pragma unroll
  for (int g = 0; g < kMaxChunks; ++g) {
    before += g < static_cast<int>(blockIdx.x) ? rows[g] : 0;
    count += rows[g];
  }
  const int offset = lay_out(count, offsets, warp_sums, experts_ids, num_tokens_post_pad,
                             num_experts, block_size, max_num_m_blocks, blockIdx.x == 0);
  if (e < num_experts) cursor[e] = offset + before;
  __syncthreads();

  for (int base = begin; base < end; base += kTile * kThreads) {
    if (base != begin) {
#pragma unroll
      for (int j = 0; j < kTile; ++j) {
        expert[j] = expert_at(topk_ids, base + j * kThreads + threadIdx.x, end, num_experts);
      }
    }
#pragma unroll
    for (int j = 0; j < kTile; ++j) {
      if (expert[j] >= 0) {
        sorted_token_ids[atomicAdd(&cursor[expert[j]], 1)] = base + j * kThreads + threadIdx.x;
      }
    }
  }
}
