// Reference for llm/top_k_top_p_sampling_from_logits: FlashInfer's top-k-then-top-p sampling
// from fp32 logits (filter order top_k_first), with the row's uniform draw as an input: the
// inverse CDF of the filtered softmax at u, tokens in vocabulary order.
//
// One block of 512 threads per row. The block finds the filtered set as a threshold on the
// logits' order-preserving integer keys (ties are one key, so they stay together, as the task
// defines), then draws the token with a hierarchical prefix search. The steps:
//
//   1. max pass (global): m = max l.
//   2. histogram pass (global): per warp, counts (and, for a top-p-only row, masses
//      exp(l - m)) of the logits within 16 nats of m, in 32 buckets of half a nat. From them the
//      block picks the smallest cutoff m - c (c a multiple of 0.5) whose candidates l >= m - c
//      are sure to hold the filtered set (at least k of them; or, top-p only, at least p of the
//      row's mass, with a 1e-4 margin for fp32 sums) and fit in shared memory.
//   3. collection pass (global): each warp appends the candidates of its 1/16 of the row, in
//      vocabulary order, to its own shared-memory list (keys and token ids).
//   4. in shared memory: the top-k threshold (the smallest key with fewer than k larger), Z_K,
//      and the top-p threshold (the smallest key with less than p * Z_K above it among K), each
//      an 8-ary search over the 32-bit key space (11 steps, 7 pivots summed per step).
//   5. the draw: the per-warp sums of the kept weights locate the warp list holding u * Z_N,
//      16 piece sums of that list the piece, and a warp scan the token.
//
// A row with neither filter skips 2-4 and draws from the whole row (two global passes). A row
// whose filtered set does not fit (a flat distribution with a large nucleus, a large k) runs
// steps 4 and 5 over the row in global memory instead: correct, but each search step is a pass
// over the row; the task's visible cases seldom take that path (see the notes).
//
// clang-format off
// @launch if (batch_size > 0 && batch_size <= 16) top_k_top_p_sampling_kernel<8><<<batch_size * 8, 512>>>(logits, uniform_samples, top_k, top_p, samples, vocab_size)
// @cluster top_k_top_p_sampling_kernel<8> (8, 1, 1)
// @launch if (batch_size > 16 && batch_size <= 33) top_k_top_p_sampling_kernel<4><<<batch_size * 4, 512>>>(logits, uniform_samples, top_k, top_p, samples, vocab_size)
// @cluster top_k_top_p_sampling_kernel<4> (4, 1, 1)
// @launch if (batch_size > 33 && batch_size <= 66) top_k_top_p_sampling_kernel<2><<<batch_size * 2, 512>>>(logits, uniform_samples, top_k, top_p, samples, vocab_size)
// @cluster top_k_top_p_sampling_kernel<2> (2, 1, 1)
// @launch if (batch_size > 66) top_k_top_p_sampling_kernel<1><<<batch_size, 512>>>(logits, uniform_samples, top_k, top_p, samples, vocab_size)
// clang-format on
//
// Design notes:
// - Memory bound at large batches (256 rows of 152k logits are 155 MB; three passes), bound by
//   one SM's L2 bandwidth and exp throughput at small ones: exp is evaluated only where its value
//   is used (masses of top-p-only rows, candidates, the draw), never for the max or counts.
// - Global passes read 16-byte vectors where rows are aligned (vocab_size % 4 == 0); each warp
//   owns a contiguous segment of the row (a multiple of 128 logits), so the collection keeps
//   vocabulary order with a warp prefix sum of per-lane counts.
// - Every decision is made from block-wide sums broadcast through shared memory, so all threads
//   take the same branch; fp32 sums are not the exact ones, which the task's checker allows for
//   (1e-4 of the filtered mass).
// - Small batches split a row over a thread-block cluster: 8 blocks a row up to 16 rows, 4 up
//   to 33, 2 up to 66 (about one wave of 132 SMs), one block beyond. Warp w's segment of the row
//   is cut into one piece per block, in rank order; every block runs the max and histogram
//   passes over its pieces and sums its peers' results through distributed shared memory in rank
//   order, so every block reaches the same cutoff bit for bit; each collects its pieces'
//   candidates, and the first block appends its peers' lists to its own (vocabulary order) and
//   runs the thresholds and the draw alone. Rows without filters, or whose candidates do not fit,
//   are the first block's alone after the max (the global-memory path). On the H200
//   (h200_reference_variants.json, 2026-12-05, three draws of the visible cases) 1.44-2.59x the
//   one-block-a-row kernel up to batch 64 and 0.99-1.01x at 128 and 256 (4.3x on a draw where a
//   batch-256 row overflowed one block's lists and fitted the cluster's pieces); at batch 1 to
//   32 the one-block kernel was 1.11-1.45x FlashInfer's sampler, and this kernel is 0.36-0.73x
//   the faster of FlashInfer's sampler and its torch.compile at batch 1 to 128 (h200_parity.json,
//   2026-12-05), but 1.88x at batch 256, where the parity run's draws sent rows to the
//   global-memory path (below).
// - Candidate lists hold 256 entries a warp. With the exact masses most rows fit, not all: a
//   model of steps 1-2 on the visible cases' distributions (bench/gpu/sampling_capacity.py, 400
//   rows a setting) finds top-p 0.95 rows without top-k needing up to 4300 candidates, over 256
//   in the fullest warp in 3 % of the draws of 152k logits. A call is as slow as its slowest
//   row, so batch_256_qwen (32 such rows, one block a row) takes the global-memory path for some
//   row in about 62 % of draws: the parity harness timed the kernel at 682 us on its draw of that
//   case against crucible's 238 us on its own (h200_parity.json); in one eval of 2026-12-05 the
//   same code took 238-244 us on some samples' draws and 1.06 ms on others, so a candidate's
//   speedup on that case follows its draw until no row overflows. variants.py's pooled_lists
//   keeps every warp's list in one pool of 6144 entries, which no modelled row overflowed; as
//   written it returned wrong tokens on the H200 (2 of 8 rows of batch_8_qwen, 2026-12-05), as
//   did the load-ahead variants. Run on the CPU under a host emulation of the CUDA model
//   (bench/gpu/sampling_state.py), on the very inputs of those cases, both give the right
//   tokens. The H200's wrong ones do not follow the data: one load-ahead row's token is the one
//   drawn without the row's top token, and the pooled kernel's come from the last chunk of a
//   warp's segment, the same token under two different draws (inside the nucleus in one, far
//   outside it in the other). So the fault looks to lie outside the programming model.
//   sampling_state.py compares each row's state step by step on the GPU against the emulation;
//   until it names the step, the pool is not taken. variants.py's wide_lists keeps this layout
//   with 512 entries a warp (dynamic shared memory), which the modelled rows' fullest warp (310)
//   fits.
// - Where a batch-1 row's time went in the one-block kernel (bench/gpu/sampling_steps.py, clock
//   stamps per step, H200, h200_sampling_steps.json; 128k logits in a 96 us kernel): max pass
//   5.7 us, histogram pass 25.4, cutoff 1.9, collection 25.9, top-k threshold 15.2, top-p
//   threshold 15.5, draw 1.8. The histogram and collection passes read the same logits as the
//   max pass at a fifth of its speed: as compiled, each chunk's loads are used right after they
//   are issued, behind the previous chunk's shared-memory atomics or stores. Also tried and
//   slower: eight 16-byte loads in flight a thread in the global passes (batch 1 91 -> 98 us,
//   batch 256 238 -> 1078 us at 118 registers); histogram counts aggregated with
//   __match_any_sync, the top-p masses bounded below from the counts instead of summed, with
//   1024-candidate lists for batches up to 132 (0.12-1.4 ms a call: the looser bound cut deeper,
//   the candidates overflowed and rows took the global-memory path); the histogram over 8 nats
//   (0.10-0.19x from batch 8: p = 0.95 nuclei no longer fit); threshold searches in which every
//   warp sums every candidate against 7 pivots of its own, 5 steps instead of 11 (the search
//   here is 1.05-1.81x faster, h200_reference_variants_dec04.json); the thresholds over the
//   sorted candidate keys (0.80-0.85x from batch 8, 2026-12-05).

namespace {

__device__ __forceinline__ float positive_infinity() { return __int_as_float(0x7f800000); }

constexpr int kThreads = 512;  // must equal the block size in the directive
constexpr int kWarps = kThreads / 32;
// Candidate logits each warp may keep in shared memory (16 x 256 x 8 bytes = 32 KiB).
constexpr int kWarpCapacity = 256;
// Histogram of m - l: 32 buckets of half a nat, so cutoffs up to 16 nats below the max.
constexpr int kBuckets = 32;
constexpr float kBucketsPerNat = 2.0f;
constexpr float kHistogramRange = kBuckets / kBucketsPerNat;
// Pivots per search step (an 8-ary search: 3 bits of the key a step).
constexpr int kPivots = 7;

// Order-preserving key of a logit: larger logit, larger key; -0 and +0 share one key.
__device__ __forceinline__ unsigned int key_of(float x) {
  const unsigned int bits = x == 0.0f ? 0u : __float_as_uint(x);
  return (bits & 0x80000000u) != 0u ? ~bits : (bits | 0x80000000u);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

// Shared state of the block.
struct Shared {
  float logit[kWarps][kWarpCapacity];
  int token[kWarps][kWarpCapacity];
  int count[kWarps];                  // candidates in each warp's list
  float reduce[kWarps][kPivots + 1];  // per-warp partial sums of block reductions
  float histogram_mass[kWarps][kBuckets];
  int histogram_count[kWarps][kBuckets];
  int result;
};

// Sums of N values over the block, returned to every thread. Two barriers: the scratch is free
// again when it returns.
template <int N>
__device__ __forceinline__ void block_sums(float (&v)[N], Shared& s) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const float total = warp_sum(v[i]);
    if (lane == 0) s.reduce[warp][i] = total;
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < N; ++i) {
    float total = 0.0f;
    for (int w = 0; w < kWarps; ++w) total += s.reduce[w][i];
    v[i] = total;
  }
  __syncthreads();
}

__device__ __forceinline__ float block_max(float v, Shared& s) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  v = warp_max(v);
  if (lane == 0) s.reduce[warp][0] = v;
  __syncthreads();
  float m = -positive_infinity();
  for (int w = 0; w < kWarps; ++w) m = fmaxf(m, s.reduce[w][0]);
  __syncthreads();
  return m;
}

// The row as kWarps ordered lists: in global memory (warp w: logits [w * segment, ...)) or in
// shared memory (warp w's candidates).
struct Lists {
  const float* row;
  int vocab;
  int segment;
  const Shared* shared;  // non-null: the candidate lists

  __device__ int size(int w) const {
    if (shared != nullptr) return shared->count[w];
    const int begin = w * segment;
    const int end = min(vocab, begin + segment);
    return max(0, end - begin);
  }
  __device__ float logit(int w, int i) const {
    return shared != nullptr ? shared->logit[w][i] : row[w * segment + i];
  }
  __device__ int token(int w, int i) const {
    return shared != nullptr ? shared->token[w][i] : w * segment + i;
  }
};

// The smallest key x for which the sum, over the entries with key >= base and key > x, of 1
// (count) or exp(l - m) (mass) is below target; an 8-ary search over [0, 2^32).
__device__ unsigned int smallest_key_below(const Lists& lists, unsigned int base, float target,
                                           bool mass, float m, Shared& s) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int n = lists.size(warp);
  unsigned long long lo = 0, hi = 0xffffffffull;
  while (lo < hi) {
    unsigned long long pivot[kPivots];
#pragma unroll
    for (int i = 0; i < kPivots; ++i) pivot[i] = lo + (hi - lo) * (i + 1) / (kPivots + 1);
    float sums[kPivots];
#pragma unroll
    for (int i = 0; i < kPivots; ++i) sums[i] = 0.0f;
    for (int e = lane; e < n; e += 32) {
      const float l = lists.logit(warp, e);
      const unsigned int key = key_of(l);
      if (key < base) continue;
      const float value = mass ? __expf(l - m) : 1.0f;
#pragma unroll
      for (int i = 0; i < kPivots; ++i) sums[i] += key > pivot[i] ? value : 0.0f;
    }
    block_sums(sums, s);
    // The predicate (sum < target) grows with the pivot: keep the bracket around its first
    // true pivot.
    unsigned long long new_lo = pivot[kPivots - 1] + 1, new_hi = hi;
#pragma unroll
    for (int i = kPivots - 1; i >= 0; --i) {
      if (sums[i] < target) {
        new_hi = pivot[i];
        new_lo = i > 0 ? pivot[i - 1] + 1 : lo;
      }
    }
    lo = new_lo;
    hi = new_hi;
  }
  return static_cast<unsigned int>(lo);
}

// Sum over every list of exp(l - m) for keys >= threshold.
__device__ float kept_mass(const Lists& lists, unsigned int threshold, float m, Shared& s) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int n = lists.size(warp);
  float sum[1] = {0.0f};
  for (int e = lane; e < n; e += 32) {
    const float l = lists.logit(warp, e);
    if (key_of(l) >= threshold) sum[0] += __expf(l - m);
  }
  block_sums(sum, s);
  return sum[0];
}

// Among kWarps consecutive piece sums (s.reduce[w][0]), the piece holding `target` (the first
// whose running end passes it), or the last nonempty piece when none does (u = 1, or fp32 sums
// that fall short): then target becomes +inf so later levels take their last entries too.
__device__ int choose_piece(const Shared& s, float& target) {
  float running = 0.0f;
  int chosen = -1, last = 0;
  float before = 0.0f;
  for (int w = 0; w < kWarps; ++w) {
    const float sum = s.reduce[w][0];
    if (sum > 0.0f) {
      if (chosen < 0 && running + sum > target) {
        chosen = w;
        before = running;
      }
      last = w;
    }
    running += sum;
  }
  if (chosen < 0) {
    target = positive_infinity();
    return last;
  }
  target -= before;
  return chosen;
}

// The token: the first entry (list order) whose running sum of kept weights passes u * total.
__device__ int draw(const Lists& lists, unsigned int threshold, float m, float u, Shared& s) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;

  // Level 1: the list.
  float sum = 0.0f;
  {
    const int n = lists.size(warp);
    for (int e = lane; e < n; e += 32) {
      const float l = lists.logit(warp, e);
      if (key_of(l) >= threshold) sum += __expf(l - m);
    }
  }
  sum = warp_sum(sum);
  if (lane == 0) s.reduce[warp][0] = sum;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < kWarps; ++w) total += s.reduce[w][0];
  float target = u * total;
  const int list = choose_piece(s, target);
  __syncthreads();

  // Level 2: one of kWarps pieces of that list, warp w summing piece w.
  const int n = lists.size(list);
  const int piece_size = (n + kWarps - 1) / kWarps;
  sum = 0.0f;
  {
    const int begin = warp * piece_size;
    const int end = min(n, begin + piece_size);
    for (int e = begin + lane; e < end; e += 32) {
      const float l = lists.logit(list, e);
      if (key_of(l) >= threshold) sum += __expf(l - m);
    }
  }
  sum = warp_sum(sum);
  if (lane == 0) s.reduce[warp][0] = sum;
  __syncthreads();
  const int piece = choose_piece(s, target);
  __syncthreads();

  // Level 3: warp 0 scans the piece 32 entries at a time.
  if (warp == 0) {
    const int begin = piece * piece_size;
    const int end = min(n, begin + piece_size);
    float running = 0.0f;
    int found = -1, last = -1;
    for (int base = begin; base < end && found < 0; base += 32) {
      const int e = base + lane;
      float weight = 0.0f;
      if (e < end) {
        const float l = lists.logit(list, e);
        if (key_of(l) >= threshold) weight = __expf(l - m);
      }
      float inclusive = weight;
#pragma unroll
      for (int offset = 1; offset < 32; offset <<= 1) {
        const float other = __shfl_up_sync(0xffffffffu, inclusive, offset);
        if (lane >= offset) inclusive += other;
      }
      const unsigned int crossed =
          __ballot_sync(0xffffffffu, weight > 0.0f && running + inclusive > target);
      const unsigned int kept = __ballot_sync(0xffffffffu, weight > 0.0f);
      if (crossed != 0u) {
        found = lists.token(list, base + __ffs(crossed) - 1);
      } else if (kept != 0u) {
        last = lists.token(list, base + 31 - __clz(kept));
      }
      running += __shfl_sync(0xffffffffu, inclusive, 31);
    }
    if (lane == 0) s.result = found >= 0 ? found : last;
  }
  __syncthreads();
  return s.result;
}

// What the blocks of a cluster exchange.
struct ClusterShared {
  float value;                        // the block's max
  float z;                            // the block's part of a top-p-only row's mass
  int total_count[kWarps][kBuckets];  // the row's histogram, summed over the cluster
  float total_mass[kWarps][kBuckets];
};
static_assert(kWarps * kBuckets == kThreads, "one thread a (warp, bucket) total");

// Every thread of every block of the cluster: shared-memory writes before it are visible to
// reads after it, in any block.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::
                   : "memory");
}

// The address of `address` (this block's shared memory) in block `rank` of the cluster.
__device__ __forceinline__ unsigned peer_shared_address(unsigned address, unsigned rank) {
  unsigned peer;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(peer) : "r"(address), "r"(rank));
  return peer;
}

__device__ __forceinline__ unsigned cluster_rank() {
  unsigned rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return rank;
}

// `pointer` (this block's shared memory) in block `rank` of the cluster.
__device__ __forceinline__ unsigned peer_address(const void* pointer, int rank) {
  return peer_shared_address(static_cast<unsigned>(__cvta_generic_to_shared(pointer)), rank);
}

// The 32 bits at `pointer` in block `rank`, as this pointer's type.
__device__ __forceinline__ unsigned load_peer_bits(const void* pointer, int rank) {
  unsigned v;
  asm volatile("ld.shared::cluster.b32 %0, [%1];\n"
               : "=r"(v)
               : "r"(peer_address(pointer, rank))
               : "memory");
  return v;
}

__device__ __forceinline__ float load_peer(const float* pointer, int rank) {
  return __uint_as_float(load_peer_bits(pointer, rank));
}

__device__ __forceinline__ int load_peer(const int* pointer, int rank) {
  return static_cast<int>(load_peer_bits(pointer, rank));
}

}  // namespace

// logits: [batch_size, vocab_size]; uniform_samples, top_k, top_p, samples: [batch_size].
template <int kCluster>
__global__ void __launch_bounds__(kThreads)
    top_k_top_p_sampling_kernel(const float* __restrict__ logits,
                                const float* __restrict__ uniform_samples,
                                const int* __restrict__ top_k, const float* __restrict__ top_p,
                                int* __restrict__ samples, int vocab_size) {
  __shared__ Shared s;
  __shared__ ClusterShared cs;
  const int rank = kCluster > 1 ? static_cast<int>(cluster_rank()) : 0;
  const int row_index = static_cast<int>(blockIdx.x) / kCluster;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const float* row = logits + static_cast<size_t>(row_index) * static_cast<size_t>(vocab_size);
  const int k_raw = top_k[row_index];
  const bool k_active = k_raw > 0 && k_raw < vocab_size;
  const float p = top_p[row_index];
  const bool p_active = p < 1.0f;
  const float u = uniform_samples[row_index];

  // Each warp's segment: a multiple of 128 logits, so 16-byte vectors stay within it.
  const int segment = ((vocab_size + kWarps - 1) / kWarps + 127) / 128 * 128;
  // This block's piece of it (pieces of whole chunks, in rank order).
  const int piece = (segment / 128 + kCluster - 1) / kCluster * 128;
  const int warp_end = min(vocab_size, warp * segment + segment);
  const int seg_begin = min(warp_end, warp * segment + rank * piece);
  const int seg_end = min(warp_end, seg_begin + piece);
  const bool vectors = vocab_size % 4 == 0;
  // Lane `lane` of chunk c holds the logits c * 128 + lane * 4 + j (j < 4) of the segment;
  // positions at or past the segment's end hold -inf. Every load's address is clamped into the
  // segment by arithmetic (min with its last vector or logit), and past-the-end values are
  // dropped by a select after the load. A select of the address on the same condition as the
  // value is not enough: the compiler may fold `c ? load(c ? a : b) : none` into
  // `c ? load(a) : none`, which reads past the end. Both the guarded form `j < valid ?
  // row[first + j] : -inf` and that select ran on the H200 as reads of the 16 bytes past the
  // row's end, in the one lane whose chunk starts exactly at the end of a vectorised row
  // (h_uniform_logits, vocab 5000: lane 2 of warp 13; compute-sanitizer's memcheck flags it
  // when the rows end the allocation), so the token depended on whatever followed the row (the
  // runner's random canaries: the task failed on some runner jobs and not others).
  // bench/gpu/sampling_row_tail.cu runs that case with other values after the rows and under
  // memcheck.
  auto load_chunk = [&](int base, float(&v)[4], int& valid) {
    const int first = base + lane * 4;
    valid = max(0, min(4, seg_end - first));
    if (vectors) {
      // seg_end and first are multiples of 4 here: valid is 4 or 0, and seg_end - 4 is the
      // segment's last vector (the segment is not empty where this runs).
      const float4 x = *reinterpret_cast<const float4*>(row + min(first, seg_end - 4));
      const float none = -positive_infinity();
      v[0] = valid == 4 ? x.x : none;
      v[1] = valid == 4 ? x.y : none;
      v[2] = valid == 4 ? x.z : none;
      v[3] = valid == 4 ? x.w : none;
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float x = row[min(first + j, seg_end - 1)];
        v[j] = j < valid ? x : -positive_infinity();
      }
    }
  };

  // 1. The max.
  float m = -positive_infinity();
  for (int base = seg_begin; base < seg_end; base += 128) {
    float v[4];
    int valid;
    load_chunk(base, v, valid);
#pragma unroll
    for (int j = 0; j < 4; ++j) m = fmaxf(m, v[j]);
  }
  m = block_max(m, s);
  if constexpr (kCluster > 1) {
    if (threadIdx.x == 0) cs.value = m;
    cluster_sync();
    for (int r = 0; r < kCluster; ++r) m = fmaxf(m, load_peer(&cs.value, r));
  }

  Lists lists{row, vocab_size, segment, nullptr};
  if (!k_active && !p_active) {
    if constexpr (kCluster > 1) {
      cluster_sync();  // every peer's max read: the others may leave
      if (rank != 0) return;
    }
    const int token = draw(lists, 0u, m, u, s);
    if (threadIdx.x == 0) samples[row_index] = token;
    return;
  }

  // 2. Per-warp histogram of m - l over the top 16 nats (masses only for a top-p-only row,
  // which also needs the row's total mass Z).
  const bool need_mass = !k_active;
  for (int i = threadIdx.x; i < kWarps * kBuckets; i += kThreads) {
    (&s.histogram_count[0][0])[i] = 0;
    (&s.histogram_mass[0][0])[i] = 0.0f;
  }
  __syncthreads();
  float z_row[1] = {0.0f};
  for (int base = seg_begin; base < seg_end; base += 128) {
    float v[4];
    int valid;
    load_chunk(base, v, valid);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float d = m - v[j];  // +inf for padding lanes
      const float w = need_mass ? __expf(-d) : 0.0f;
      z_row[0] += w;
      if (d < kHistogramRange) {
        const int bucket = static_cast<int>(d * kBucketsPerNat);
        atomicAdd(&s.histogram_count[warp][bucket], 1);
        if (need_mass) atomicAdd(&s.histogram_mass[warp][bucket], w);
      }
    }
  }
  block_sums(z_row, s);  // its barriers also publish the histograms
  float z = z_row[0];
  if constexpr (kCluster > 1) {
    // The row's histogram and mass, summed over the cluster in rank order by every block.
    if (threadIdx.x == 0) cs.z = z;
    cluster_sync();
    const int w = threadIdx.x / kBuckets, b = threadIdx.x % kBuckets;
    int total = 0;
    float mass = 0.0f;
    z = 0.0f;
    for (int r = 0; r < kCluster; ++r) {
      total += load_peer(&s.histogram_count[w][b], r);
      mass += load_peer(&s.histogram_mass[w][b], r);
      z += load_peer(&cs.z, r);
    }
    cs.total_count[w][b] = total;
    cs.total_mass[w][b] = mass;
    __syncthreads();
  }
  const auto& histogram_count = kCluster > 1 ? cs.total_count : s.histogram_count;
  const auto& histogram_mass = kCluster > 1 ? cs.total_mass : s.histogram_mass;

  // The smallest cutoff bucket whose candidates hold the filtered set and fit.
  int cutoff = -1;
  {
    int warp_counts[kWarps];
#pragma unroll
    for (int w = 0; w < kWarps; ++w) warp_counts[w] = 0;
    float count = 0.0f, mass = 0.0f;
    for (int b = 0; b < kBuckets && cutoff < 0; ++b) {
      bool fits = true;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        warp_counts[w] += histogram_count[w][b];
        count += static_cast<float>(histogram_count[w][b]);
        mass += histogram_mass[w][b];
        fits = fits && warp_counts[w] <= kWarpCapacity;
      }
      if (!fits) break;
      const bool holds =
          k_active ? count >= static_cast<float>(k_raw) : mass >= p * z * (1.0f + 1e-4f);
      if (holds) cutoff = b;
    }
  }

  unsigned int threshold = 0u;
  if constexpr (kCluster > 1) {
    if (cutoff < 0) {  // the whole row from global memory: the first block's work
      cluster_sync();  // every peer's histogram read
      if (rank != 0) return;
    }
  }
  if (cutoff >= 0) {
    // 3. Collect the candidates (bucket <= cutoff), each warp in the order of its segment.
    int stored = 0;
    for (int base = seg_begin; base < seg_end; base += 128) {
      float v[4];
      int valid;
      load_chunk(base, v, valid);
      bool take[4];
      int mine = 0;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float d = m - v[j];
        take[j] = d < kHistogramRange && static_cast<int>(d * kBucketsPerNat) <= cutoff;
        mine += take[j] ? 1 : 0;
      }
      int offset = mine;  // inclusive prefix over lanes
#pragma unroll
      for (int step = 1; step < 32; step <<= 1) {
        const int other = __shfl_up_sync(0xffffffffu, offset, step);
        if (lane >= step) offset += other;
      }
      const int chunk_total = __shfl_sync(0xffffffffu, offset, 31);
      int slot = stored + offset - mine;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (take[j]) {
          s.logit[warp][slot] = v[j];
          s.token[warp][slot] = base + lane * 4 + j;
          ++slot;
        }
      }
      stored += chunk_total;
    }
    if (lane == 0) s.count[warp] = stored;
    __syncthreads();
    if constexpr (kCluster > 1) {
      // The first block appends its peers' lists to its own, in rank order. The cutoff
      // held every warp's summed count within kWarpCapacity.
      cluster_sync();
      if (rank == 0) {
        int total = s.count[warp];
        for (int r = 1; r < kCluster; ++r) {
          const int n = load_peer(&s.count[warp], r);
          for (int i = lane; i < n; i += 32) {
            s.logit[warp][total + i] = load_peer(&s.logit[warp][i], r);
            s.token[warp][total + i] = load_peer(&s.token[warp][i], r);
          }
          total += n;
        }
        __syncwarp();
        if (lane == 0) s.count[warp] = total;
      }
      cluster_sync();  // the peers' lists read: they may leave
      if (rank != 0) return;
    }
    lists.shared = &s;
  }

  // 4. The thresholds, over the candidates (or the whole row when they did not fit).
  float z_k = z;
  if (k_active) {
    threshold = smallest_key_below(lists, 0u, static_cast<float>(k_raw), false, m, s);
    z_k = kept_mass(lists, threshold, m, s);
  }
  if (p_active) threshold = smallest_key_below(lists, threshold, p * z_k, true, m, s);

  // 5. The draw.
  const int token = draw(lists, threshold, m, u, s);
  if (threadIdx.x == 0) samples[row_index] = token;
}
