// Reference for llm/paged_decode_attention: vLLM's decode attention over the paged KV cache
// (flash layout), grouped-query heads, bf16 in and out, fp32 softmax and sums.
//
// Device code only, compiled by NVRTC for sm_90a and launched as the directives below say (see
// kernels/llm/rms_norm.cu for the conventions). For every sequence s, query head h, kv head
// g = h / (num_heads / num_kv_heads) and n = seq_lens[s]:
//
//   token j < n is row (block_tables[s, j / block_size], j % block_size, g) of the caches
//   score[j] = scale * dot(query[s, h, :], key[j, :])
//   out[s, h, :] = sum_j softmax(score)[j] * value[j, :]
//
// Flash-decoding (split-K) in two kernels:
//
//   1. paged_decode_attention_split<kHeadSize, kUpperRows, kStages>: grid (partitions,
//      num_kv_heads, num_seqs), 4 warps. Block (p, g, s) attends the G = num_heads /
//      num_kv_heads query heads of kv head g over tokens [p * P, (p + 1) * P) of sequence s,
//      reading those keys and values once for all G heads. A sequence that fits in one
//      partition (n <= P) is finished there: the block writes bf16 out. Otherwise it writes its
//      partial result (running max, sum of weights, unnormalised output, fp32) to the
//      workspaces. Blocks whose partition starts at or past n exit at once.
//   2. paged_decode_attention_merge: one block per (head, sequence), launched only when some
//      sequence can span several partitions; it combines the partials of the sequences that do
//      (log-sum-exp weights) and writes out. Sequences of one partition are skipped.
//
// Partitions: the longest possible context C = max_blocks_per_seq * block_size is cut into cdiv(C,
// P0) partitions, P0 = max(128, cdiv(C * num_seqs * num_kv_heads, B * 64) * 64): a full-length
// batch gets about B blocks, and no block gets fewer than 128 tokens. B = 792 (two waves of three
// blocks per SM) for batches; a single sequence, whose length is C, gets B = 396, one wave.
// Measured on the H200 (bench/results/h200_reference_variants.json, bench/gpu/variants.py): at 32k
// one wave of 704-token partitions takes 48.1 us against 51.0 us for 1.7 waves of 384 (the second
// wave pays the prologue's memory round trips again and leaves SMs idle at its end), while one wave
// for batches too is slower (decode_8_qwen 31.5 against 25.7 us, decode_32_llama 45.1 against
// 41.5): most sequences are much shorter than C, so fewer blocks have work. The kernel recomputes P
// = round_up(cdiv(C, gridDim.x), 8) <= P0 from its grid, so the directives alone define the
// partitioning; block (0, 0, s) stores cdiv(n, P) in partition_counts[s] for the merge. Sequence
// lengths are data, so only C is known here:
//
//   case                P    partitions  blocks launched  blocks with work   merge
//   decode_1_llama_4k   128  32          256              256                32 blocks
//   decode_1_llama_32k  704  47          376              376                32 blocks
//   decode_8_qwen       376  22          704              264                224 blocks
//   decode_32_llama     688  3           768              400                1024 blocks
//   decode_64_qwen      688  3           768              432                1792 blocks
//   decode_128_mixtral  512  1           1024             1024               not launched
//   decode_256_llama    128  1           2048             2048               not launched
//
// Head sizes 64, 128 and 256 with up to 16 (256: 8) query heads per kv head take the
// tensor-core split kernel; any other shape (head_size 8, wider groups) takes
// paged_decode_attention_any, one block per (head, sequence), which writes out directly.
//
// clang-format off
// @launch if (head_size == 64 && num_heads <= 8 * num_kv_heads) paged_decode_attention_split<64, false, 4><<<dim3(cdiv(max_blocks_per_seq * block_size, max(128, cdiv(max_blocks_per_seq * block_size * num_seqs * num_kv_heads, 25344 * (num_seqs == 1) + 50688 * (num_seqs > 1)) * 64)), num_kv_heads, num_seqs), 128, 512 * head_size>>>(out, query, key_cache, value_cache, block_tables, seq_lens, scale, partial_out, partial_stats, partition_counts, num_seqs, num_heads, num_kv_heads, max_blocks_per_seq, block_size)
// @launch if (head_size == 64 && num_heads > 8 * num_kv_heads && num_heads <= 16 * num_kv_heads) paged_decode_attention_split<64, true, 4><<<dim3(cdiv(max_blocks_per_seq * block_size, max(128, cdiv(max_blocks_per_seq * block_size * num_seqs * num_kv_heads, 25344 * (num_seqs == 1) + 50688 * (num_seqs > 1)) * 64)), num_kv_heads, num_seqs), 128, 512 * head_size>>>(out, query, key_cache, value_cache, block_tables, seq_lens, scale, partial_out, partial_stats, partition_counts, num_seqs, num_heads, num_kv_heads, max_blocks_per_seq, block_size)
// @launch if (head_size == 128 && num_heads <= 8 * num_kv_heads) paged_decode_attention_split<128, false, 4><<<dim3(cdiv(max_blocks_per_seq * block_size, max(128, cdiv(max_blocks_per_seq * block_size * num_seqs * num_kv_heads, 25344 * (num_seqs == 1) + 50688 * (num_seqs > 1)) * 64)), num_kv_heads, num_seqs), 128, 512 * head_size>>>(out, query, key_cache, value_cache, block_tables, seq_lens, scale, partial_out, partial_stats, partition_counts, num_seqs, num_heads, num_kv_heads, max_blocks_per_seq, block_size)
// @launch if (head_size == 128 && num_heads > 8 * num_kv_heads && num_heads <= 16 * num_kv_heads) paged_decode_attention_split<128, true, 4><<<dim3(cdiv(max_blocks_per_seq * block_size, max(128, cdiv(max_blocks_per_seq * block_size * num_seqs * num_kv_heads, 25344 * (num_seqs == 1) + 50688 * (num_seqs > 1)) * 64)), num_kv_heads, num_seqs), 128, 512 * head_size>>>(out, query, key_cache, value_cache, block_tables, seq_lens, scale, partial_out, partial_stats, partition_counts, num_seqs, num_heads, num_kv_heads, max_blocks_per_seq, block_size)
// @launch if (head_size == 256 && num_heads <= 8 * num_kv_heads) paged_decode_attention_split<256, false, 2><<<dim3(cdiv(max_blocks_per_seq * block_size, max(128, cdiv(max_blocks_per_seq * block_size * num_seqs * num_kv_heads, 25344 * (num_seqs == 1) + 50688 * (num_seqs > 1)) * 64)), num_kv_heads, num_seqs), 128, 256 * head_size>>>(out, query, key_cache, value_cache, block_tables, seq_lens, scale, partial_out, partial_stats, partition_counts, num_seqs, num_heads, num_kv_heads, max_blocks_per_seq, block_size)
// @launch if (((head_size == 64 || head_size == 128) && num_heads <= 16 * num_kv_heads || head_size == 256 && num_heads <= 8 * num_kv_heads) && cdiv(max_blocks_per_seq * block_size, max(128, cdiv(max_blocks_per_seq * block_size * num_seqs * num_kv_heads, 25344 * (num_seqs == 1) + 50688 * (num_seqs > 1)) * 64)) > 1) paged_decode_attention_merge<<<dim3(num_heads, num_seqs), 256>>>(out, partial_out, partial_stats, partition_counts, num_seqs, num_heads, head_size)
// @launch if (!((head_size == 64 || head_size == 128) && num_heads <= 16 * num_kv_heads || head_size == 256 && num_heads <= 8 * num_kv_heads)) paged_decode_attention_any<<<dim3(num_heads, num_seqs), 128>>>(out, query, key_cache, value_cache, block_tables, seq_lens, scale, num_heads, num_kv_heads, head_size, max_blocks_per_seq, block_size)
// @workspace partial_out f32[cdiv(max_blocks_per_seq * block_size, max(128, cdiv(max_blocks_per_seq * block_size * num_seqs * num_kv_heads, 25344 * (num_seqs == 1) + 50688 * (num_seqs > 1)) * 64)) * num_seqs * num_heads * head_size]
// @workspace partial_stats float2[cdiv(max_blocks_per_seq * block_size, max(128, cdiv(max_blocks_per_seq * block_size * num_seqs * num_kv_heads, 25344 * (num_seqs == 1) + 50688 * (num_seqs > 1)) * 64)) * num_seqs * num_heads]
// @workspace partition_counts i32[num_seqs]
// clang-format on
//
// Design notes (why, for whoever optimises this next):
// - Memory bound: the floor is reading every visible token's key and value once (512 bytes per
//   token and kv head at head_size 128). One block serves a whole kv-head group, so GQA's G
//   query heads share one read of the cache, and a 16-byte cp.async moves every byte.
// - The math runs on tensor cores (mma.sync, bf16 in, fp32 accumulate): with G = 7 the
//   CUDA-core version needs about 4 lane instructions per byte read (1792 FMAs and 256
//   conversions per 512-byte token), half of what an SM issues per byte at full bandwidth;
//   with mma.sync it is a small fraction. The G query heads are the
//   rows of a 16-row A operand (8 rows when G <= 8: kUpperRows false keeps the upper half out
//   of registers), tokens are the n (QK^T) and k (PV) dimensions in tiles of 8.
// - No ldmatrix: the k dimension of QK^T (head dims) is permuted so that the 8 key elements a
//   lane needs for two m16n8k16 steps are one 16-byte vector; the query fragments (staged once
//   per block in shared memory) use the same permutation. PV uses m16n8k8 with the scores'
//   accumulator layout as the A operand (no shuffles); its B operand (V, k = tokens) comes from two
//   16-byte vectors of tokens 2t and 2t+1, paired by byte_perm. Output columns come out permuted
//   the same way and each lane owns 16 contiguous head dims per 64, so the epilogue is plain.
// - Each warp streams its own tiles (tile i of the partition goes to warp i % 4) through its
//   own kStages-deep cp.async ring in shared memory, so the loop needs only __syncwarp; the
//   four warps meet once, at the end, to combine their softmax states. Lane 4r + t copies
//   token r of a tile, so it needs one block-table entry per tile, loaded one tile ahead.
//   At head_size 128: 64 KiB of shared memory per block, three blocks per SM, up to 48 tiles
//   of 4 KiB in flight per SM; a partition of 128 tokens is all in flight at once.
// - Shared rows are XOR-swizzled in 16-byte units (see swizzle()): the cp.async writes, the
//   key reads (two tokens x four vectors per quarter warp) and the value reads (four tokens x
//   two vectors) are all free of bank conflicts.
// - Tokens at or past the sequence's end inside the last tile are zero-filled by cp.async
//   without reading memory (src-size 0), their scores set to -inf before the softmax. Block-
//   table entries past the sequence's last block may be loaded (see below) but never address
//   the caches.
// - The softmax weights enter the PV product rounded to bf16 (the mma operand type), as in
//   FlashAttention. Measured on the H200: against the float64 oracle the outputs' largest error
//   (0.0074 on the hidden cases) is the final rounding to bf16, the same whether or not the
//   weights also carry their rounding remainder as a second bf16 term, which cost 2-5 %.
// - Softmax in base 2 (scale * log2(e) folded into the scores) with a running max per row; a
//   tile always holds at least one visible token, so maxima are finite and exp2(-inf) = 0
//   covers empty warps and masked tokens without a NaN path.
// - The block-table entries and the query are loaded before seq_lens is known (entries of
//   tokens below C are in the table), so a block waits two memory round trips before its first
//   cache bytes arrive, not three: that is most of a 76-token sequence's time.
// - Not done: TMA or a producer warp, splitting the merge into the split kernel's last block
//   (needs a zeroed counter, and workspaces start as garbage), fp8 caches.

#include <cuda_bf16.h>

namespace {

constexpr int kWarpSize = 32;
constexpr int kWarps = 4;  // the directives launch 128 threads for the split and any kernels
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kTileTokens = 8;   // tokens per mma tile (n of QK^T, k of PV)
constexpr int kVectorElems = 8;  // bf16 per 16-byte vector
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ float negative_infinity() { return __int_as_float(0xff800000); }

__device__ __forceinline__ unsigned shared_address(const void* pointer) {
  return static_cast<unsigned>(__cvta_generic_to_shared(pointer));
}

// 16-byte global -> shared copy through L2 only. With `valid` false nothing is read (src-size
// 0) and the destination is zero-filled; `source` must still be a mapped address.
__device__ __forceinline__ void copy_async_16(unsigned destination, const void* source,
                                              bool valid) {
  const int source_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(destination), "l"(source),
               "r"(source_bytes));
}

__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;\n" ::); }

// Waits until at most kPending of this thread's committed copy groups are still in flight.
template <int kPending>
__device__ __forceinline__ void wait_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// c (16 x 8, fp32) += a (16 x 16, row-major) * b (16 x 8, column-major), bf16 inputs.
// Lane 4r + t holds a = {(r, 2t..2t+1), (r+8, 2t..), (r, 2t+8..), (r+8, 2t+8..)},
// b = {(2t..2t+1, r), (2t+8.., r)}, c = {(r, 2t), (r, 2t+1), (r+8, 2t), (r+8, 2t+1)}.
__device__ __forceinline__ void mma_16x8x16(float (&c)[4], unsigned a0, unsigned a1, unsigned a2,
                                            unsigned a3, unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// c (16 x 8, fp32) += a (16 x 8) * b (8 x 8), bf16 inputs. Lane 4r + t holds
// a = {(r, 2t..2t+1), (r+8, 2t..2t+1)}, b = (2t..2t+1, r), c as in mma_16x8x16.
__device__ __forceinline__ void mma_16x8x8(float& c0, float& c1, float& c2, float& c3, unsigned a0,
                                           unsigned a1, unsigned b) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
      : "r"(a0), "r"(a1), "r"(b));
}

__device__ __forceinline__ unsigned pack_bf16(float low, float high) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(low, high);
  return *reinterpret_cast<const unsigned*>(&pair);
}

// Shared-memory position (in 16-byte units) of vector `vector` of token `row` (0..7) of a
// tile. The XOR stays inside the vector's aligned group of 8 (128 bytes, all 32 banks): rows
// 2q and 2q+1 differ in bit 2 (conflict-free copies and key reads: two rows x vectors 4i..4i+3
// per quarter warp) and rows 0, 2, 4, 6 (and 1, 3, 5, 7) in bits 1-2 (conflict-free value
// reads: four rows x vectors {2q, 2q+1} per quarter warp).
__device__ __forceinline__ int swizzle(int vector, int row) {
  return vector ^ ((((row >> 1) & 3) << 1) ^ ((row & 1) << 2));
}

__device__ __forceinline__ float4 scaled_add(float4 acc, float weight, float4 value) {
  acc.x += weight * value.x;
  acc.y += weight * value.y;
  acc.z += weight * value.z;
  acc.w += weight * value.w;
  return acc;
}

__device__ __forceinline__ uint2 to_bf16x4(float4 value, float inverse) {
  uint2 packed;
  packed.x = pack_bf16(value.x * inverse, value.y * inverse);
  packed.y = pack_bf16(value.z * inverse, value.w * inverse);
  return packed;
}

}  // namespace

// out, query: [num_seqs, num_heads, kHeadSize]; key_cache, value_cache: [num_blocks,
// block_size, num_kv_heads, kHeadSize]; block_tables: [num_seqs, max_blocks_per_seq];
// seq_lens: [num_seqs]. Workspaces: partial_out [partitions, num_seqs, num_heads, kHeadSize],
// partial_stats [partitions, num_seqs, num_heads] (running max in log2 units, sum of weights),
// partition_counts [num_seqs]. Grid (partitions, num_kv_heads, num_seqs), 128 threads,
// dynamic shared memory kWarps * kStages * 2 * kTileTokens * kHeadSize * 2 bytes.
// kUpperRows: more than 8 query heads per kv head (at most 16).
template <int kHeadSize, bool kUpperRows, int kStages>
__global__ void __launch_bounds__(kThreads, kHeadSize <= 128 ? 3 : 2) paged_decode_attention_split(
    __nv_bfloat16* __restrict__ out, const __nv_bfloat16* __restrict__ query,
    const __nv_bfloat16* __restrict__ key_cache, const __nv_bfloat16* __restrict__ value_cache,
    const int* __restrict__ block_tables, const int* __restrict__ seq_lens, float scale,
    float* __restrict__ partial_out, float2* __restrict__ partial_stats,
    int* __restrict__ partition_counts, int num_seqs, int num_heads, int num_kv_heads,
    int max_blocks_per_seq, int block_size) {
  constexpr int kRows = kUpperRows ? 16 : 8;             // query heads of the group per block
  constexpr int kRowVectors = kHeadSize / kVectorElems;  // 16-byte vectors per cache row
  constexpr int kRowBytes = kHeadSize * 2;
  constexpr int kTileBytes = kTileTokens * kRowBytes;  // keys (or values) of one tile
  constexpr int kStageBytes = 2 * kTileBytes;
  constexpr int kWarpBytes = kStages * kStageBytes;  // one warp's ring
  constexpr int kKeyPairs = kHeadSize / 32;          // pairs of m16n8k16 steps over head dims
  constexpr int kValueHalves = kHeadSize / 64;       // 64-dim slices of the PV product
  constexpr int kOutTiles = kHeadSize / 8;           // n8 tiles of the output
  constexpr int kCopies = kRowVectors / 4;           // vectors per lane per tile, of K and of V
  static_assert(kHeadSize % 64 == 0, "value slices are 64 dims");
  static_assert(kStages >= 2, "one tile in flight while another is used");
  static_assert(kRows * kHeadSize * 4 <= kWarpBytes, "a warp's ring holds its output rows");

  extern __shared__ __align__(16) unsigned char shared_storage[];
  __shared__ float warp_max[kWarps][kRows];
  __shared__ float warp_sum[kWarps][kRows];
  __shared__ uint4 shared_query[kRows * kRowVectors];

  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int r = lane >> 2;  // mma group: query row, key token, output row
  const int t = lane & 3;   // thread in group
  const int partition = static_cast<int>(blockIdx.x);
  const int kv_head = static_cast<int>(blockIdx.y);
  const int seq = static_cast<int>(blockIdx.z);
  const int group = num_heads / num_kv_heads;

  const int context = max_blocks_per_seq * block_size;
  const int partition_tokens =
      ((context + static_cast<int>(gridDim.x) - 1) / static_cast<int>(gridDim.x) + 7) & ~7;
  const int start = partition * partition_tokens;
  const int bound = min(start + partition_tokens, context);  // past the table row's tokens
  const int* table = block_tables + static_cast<size_t>(seq) * max_blocks_per_seq;

  // Issued before seq_lens arrives (see the design notes): block-table entries of this warp's
  // first kStages tiles, and the query rows. Lane 4r + t copies token r of each tile.
  auto tile_token = [&](int k) { return start + (warp + k * kWarps) * kTileTokens + r; };
  int entries[kStages];
#pragma unroll
  for (int k = 0; k < kStages; ++k) {
    const int token = tile_token(k);
    entries[k] = token < bound ? table[token / block_size] : 0;
  }
  // The group's query rows (zeros past the group), for the shared copy below.
  constexpr int kQueryVectors = kRows * kRowVectors;
  constexpr int kQueryLoads = (kQueryVectors + kThreads - 1) / kThreads;
  uint4 query_vectors[kQueryLoads];
  const __nv_bfloat16* query_rows =
      query +
      (static_cast<size_t>(seq) * num_heads + static_cast<size_t>(kv_head) * group) * kHeadSize;
#pragma unroll
  for (int i = 0; i < kQueryLoads; ++i) {
    const int index = static_cast<int>(threadIdx.x) + i * kThreads;
    query_vectors[i] = index < kQueryVectors && index / kRowVectors < group
                           ? *reinterpret_cast<const uint4*>(query_rows + index * kVectorElems)
                           : make_uint4(0, 0, 0, 0);
  }

  const int length = min(seq_lens[seq], context);
  const int count = (length + partition_tokens - 1) / partition_tokens;
  if (partition == 0 && kv_head == 0 && threadIdx.x == 0) partition_counts[seq] = count;
  if (start >= length) return;  // uniform across the block
  const int end = min(start + partition_tokens, length);
  const int num_tiles = (end - start + kTileTokens - 1) / kTileTokens;
  const int warp_tiles = warp < num_tiles ? (num_tiles - warp + kWarps - 1) / kWarps : 0;

  unsigned char* const ring = shared_storage + warp * kWarpBytes;
  const unsigned ring_address = shared_address(ring);

  // Starts the copies of this warp's k-th tile into stage k % kStages: lane 4r + t copies
  // vectors t, t + 4, ... of token r's key and value rows.
  auto issue = [&](int k, int entry) {
    if (k >= warp_tiles) return;
    const int token = tile_token(k);
    const bool valid = token < end;
    const size_t row =
        valid ? (static_cast<size_t>(entry) * block_size + token % block_size) * num_kv_heads +
                    kv_head
              : 0;
    const __nv_bfloat16* key = key_cache + row * kHeadSize;
    const __nv_bfloat16* value = value_cache + row * kHeadSize;
    const unsigned stage = ring_address + (k % kStages) * kStageBytes + r * kRowBytes;
#pragma unroll
    for (int i = 0; i < kCopies; ++i) {
      const int vector = t + 4 * i;
      const unsigned destination = stage + swizzle(vector, r) * 16;
      copy_async_16(destination, key + vector * kVectorElems, valid);
      copy_async_16(destination + kTileBytes, value + vector * kVectorElems, valid);
    }
  };

#pragma unroll
  for (int k = 0; k < kStages - 1; ++k) {
    issue(k, entries[k]);
    commit_copies();
  }
  int next_entry = entries[kStages - 1];

  // Query rows to shared memory once the first copies are on their way, swizzled like the
  // cache tiles. Every warp reads its A fragments from there each tile (four 16-byte loads at
  // head_size 128) instead of holding them in registers: 24 fewer registers at head_size 128,
  // and no spills at 256.
#pragma unroll
  for (int i = 0; i < kQueryLoads; ++i) {
    const int index = static_cast<int>(threadIdx.x) + i * kThreads;
    const int row = index / kRowVectors;
    if (index < kQueryVectors) {
      shared_query[row * kRowVectors + swizzle(index % kRowVectors, row)] = query_vectors[i];
    }
  }
  __syncthreads();

  float acc[kOutTiles][kUpperRows ? 4 : 2];
#pragma unroll
  for (int n = 0; n < kOutTiles; ++n) {
#pragma unroll
    for (int j = 0; j < (kUpperRows ? 4 : 2); ++j) acc[n][j] = 0.0f;
  }
  float max_low = negative_infinity(), max_high = negative_infinity();
  float sum_low = 0.0f, sum_high = 0.0f;
  const float scale_log2 = scale * kLog2e;

#pragma unroll 1
  for (int k = 0; k < warp_tiles; ++k) {
    issue(k + kStages - 1, next_entry);
    commit_copies();
    {
      const int token = tile_token(k + kStages);
      next_entry = k + kStages < warp_tiles && token < end ? table[token / block_size] : 0;
    }
    wait_copies<kStages - 1>();  // this lane's copies of tile k have landed
    __syncwarp();                // and every lane's

    const unsigned char* keys = ring + (k % kStages) * kStageBytes;
    const unsigned char* values = keys + kTileBytes;

    // Scores of tokens 2t, 2t+1 for rows r and r + 8.
    float score[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < kKeyPairs; ++i) {
      const uint4 key =
          *reinterpret_cast<const uint4*>(keys + r * kRowBytes + swizzle(4 * i + t, r) * 16);
      // Query row r (and r + 8), head dims 32i + 8t .. 32i + 8t + 7: the same permuted k.
      const uint4 q_low = shared_query[r * kRowVectors + swizzle(4 * i + t, r)];
      const uint4 q_high = kUpperRows
                               ? shared_query[(r + 8) * kRowVectors + swizzle(4 * i + t, r + 8)]
                               : make_uint4(0, 0, 0, 0);
      mma_16x8x16(score, q_low.x, q_high.x, q_low.y, q_high.y, key.x, key.y);
      mma_16x8x16(score, q_low.z, q_high.z, q_low.w, q_high.w, key.z, key.w);
    }

    const int first = start + (warp + k * kWarps) * kTileTokens;
    const bool visible0 = first + 2 * t < end;
    const bool visible1 = first + 2 * t + 1 < end;
    float x0 = visible0 ? score[0] * scale_log2 : negative_infinity();
    float x1 = visible1 ? score[1] * scale_log2 : negative_infinity();
    float tile_max = fmaxf(x0, x1);
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
    const float new_max_low = fmaxf(max_low, tile_max);  // finite: token `first` is visible
    const float alpha_low = exp2f(max_low - new_max_low);
    x0 = exp2f(x0 - new_max_low);
    x1 = exp2f(x1 - new_max_low);
    sum_low = sum_low * alpha_low + x0 + x1;
    max_low = new_max_low;
    const unsigned p_low = pack_bf16(x0, x1);

    unsigned p_high = 0;
    float alpha_high = 1.0f;
    if constexpr (kUpperRows) {
      float x2 = visible0 ? score[2] * scale_log2 : negative_infinity();
      float x3 = visible1 ? score[3] * scale_log2 : negative_infinity();
      float high_max = fmaxf(x2, x3);
      high_max = fmaxf(high_max, __shfl_xor_sync(0xffffffffu, high_max, 1));
      high_max = fmaxf(high_max, __shfl_xor_sync(0xffffffffu, high_max, 2));
      const float new_max_high = fmaxf(max_high, high_max);
      alpha_high = exp2f(max_high - new_max_high);
      x2 = exp2f(x2 - new_max_high);
      x3 = exp2f(x3 - new_max_high);
      sum_high = sum_high * alpha_high + x2 + x3;
      max_high = new_max_high;
      p_high = pack_bf16(x2, x3);
    }

    // out tile (i, j) column c is head dim 64i + 8c + j: lane 4r + t's B operand is dim
    // 64i + 8r + j of tokens 2t and 2t+1.
#pragma unroll
    for (int i = 0; i < kValueHalves; ++i) {
      const int vector = 8 * i + r;
      const uint4 even = *reinterpret_cast<const uint4*>(values + (2 * t) * kRowBytes +
                                                         swizzle(vector, 2 * t) * 16);
      const uint4 odd = *reinterpret_cast<const uint4*>(values + (2 * t + 1) * kRowBytes +
                                                        swizzle(vector, 2 * t + 1) * 16);
      const unsigned even_words[4] = {even.x, even.y, even.z, even.w};
      const unsigned odd_words[4] = {odd.x, odd.y, odd.z, odd.w};
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const unsigned b =
            __byte_perm(even_words[j / 2], odd_words[j / 2], (j % 2 == 0) ? 0x5410 : 0x7632);
        float* c = acc[8 * i + j];
        c[0] *= alpha_low;
        c[1] *= alpha_low;
        if constexpr (kUpperRows) {
          c[2] *= alpha_high;
          c[3] *= alpha_high;
          mma_16x8x8(c[0], c[1], c[2], c[3], p_low, p_high, b);
        } else {
          float unused2 = 0.0f, unused3 = 0.0f;
          mma_16x8x8(c[0], c[1], unused2, unused3, p_low, p_high, b);
        }
      }
    }
    __syncwarp();  // every lane is done with this stage before it is refilled
  }
  wait_copies<0>();  // only empty groups can remain; drain them before the ring is reused
  __syncwarp();

  // Per-warp softmax states to shared memory: the row sums over the four lanes of a row, and
  // the unnormalised rows into the warp's own ring. Lane 4r + t holds dims 64i + 16t + 0..15.
  sum_low += __shfl_xor_sync(0xffffffffu, sum_low, 1);
  sum_low += __shfl_xor_sync(0xffffffffu, sum_low, 2);
  sum_high += __shfl_xor_sync(0xffffffffu, sum_high, 1);
  sum_high += __shfl_xor_sync(0xffffffffu, sum_high, 2);
  if (t == 0) {
    warp_max[warp][r] = max_low;
    warp_sum[warp][r] = sum_low;
    if constexpr (kUpperRows) {
      warp_max[warp][r + 8] = max_high;
      warp_sum[warp][r + 8] = sum_high;
    }
  }
  float* const rows = reinterpret_cast<float*>(ring);
#pragma unroll
  for (int i = 0; i < kValueHalves; ++i) {
    float4* low = reinterpret_cast<float4*>(rows + r * kHeadSize + 64 * i + 16 * t);
    low[0] = make_float4(acc[8 * i][0], acc[8 * i + 1][0], acc[8 * i + 2][0], acc[8 * i + 3][0]);
    low[1] =
        make_float4(acc[8 * i + 4][0], acc[8 * i + 5][0], acc[8 * i + 6][0], acc[8 * i + 7][0]);
    low[2] = make_float4(acc[8 * i][1], acc[8 * i + 1][1], acc[8 * i + 2][1], acc[8 * i + 3][1]);
    low[3] =
        make_float4(acc[8 * i + 4][1], acc[8 * i + 5][1], acc[8 * i + 6][1], acc[8 * i + 7][1]);
    if constexpr (kUpperRows) {
      float4* high = reinterpret_cast<float4*>(rows + (r + 8) * kHeadSize + 64 * i + 16 * t);
      high[0] = make_float4(acc[8 * i][2], acc[8 * i + 1][2], acc[8 * i + 2][2], acc[8 * i + 3][2]);
      high[1] =
          make_float4(acc[8 * i + 4][2], acc[8 * i + 5][2], acc[8 * i + 6][2], acc[8 * i + 7][2]);
      high[2] = make_float4(acc[8 * i][3], acc[8 * i + 1][3], acc[8 * i + 2][3], acc[8 * i + 3][3]);
      high[3] =
          make_float4(acc[8 * i + 4][3], acc[8 * i + 5][3], acc[8 * i + 6][3], acc[8 * i + 7][3]);
    }
  }
  __syncthreads();

  // Combine the four warps (a warp without tiles has max -inf: weight 0) and write either out
  // (the sequence has one partition) or this partition's partial.
  constexpr int kColumnVectors = kHeadSize / 4;
  for (int item = static_cast<int>(threadIdx.x); item < group * kColumnVectors; item += kThreads) {
    const int row = item / kColumnVectors;
    const int column = (item % kColumnVectors) * 4;
    float block_max = warp_max[0][row];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) block_max = fmaxf(block_max, warp_max[w][row]);
    float total = 0.0f;
    float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float weight = exp2f(warp_max[w][row] - block_max);
      total += weight * warp_sum[w][row];
      const float* warp_rows = reinterpret_cast<const float*>(shared_storage + w * kWarpBytes);
      o = scaled_add(o, weight,
                     *reinterpret_cast<const float4*>(warp_rows + row * kHeadSize + column));
    }
    const int head = kv_head * group + row;
    const size_t out_row = static_cast<size_t>(seq) * num_heads + head;
    if (count == 1) {
      *reinterpret_cast<uint2*>(out + out_row * kHeadSize + column) = to_bf16x4(o, 1.0f / total);
    } else {
      const size_t partial_row = static_cast<size_t>(partition) * num_seqs * num_heads + out_row;
      *reinterpret_cast<float4*>(partial_out + partial_row * kHeadSize + column) = o;
      if (column == 0) partial_stats[partial_row] = make_float2(block_max, total);
    }
  }
}

// Combines the partials of sequences with more than one partition. Grid (num_heads, num_seqs),
// 256 threads; head_size % 4 == 0 and head_size <= 256.
extern "C" __global__ void __launch_bounds__(256)
    paged_decode_attention_merge(__nv_bfloat16* __restrict__ out,
                                 const float* __restrict__ partial_out,
                                 const float2* __restrict__ partial_stats,
                                 const int* __restrict__ partition_counts, int num_seqs,
                                 int num_heads, int head_size) {
  constexpr int kMergeWarps = 8;
  __shared__ float warp_values[kMergeWarps];
  __shared__ float4 warp_rows[kMergeWarps][64];
  const int head = static_cast<int>(blockIdx.x);
  const int seq = static_cast<int>(blockIdx.y);
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int count = partition_counts[seq];
  if (count <= 1) return;  // the split kernel wrote this sequence's out

  const size_t partition_stride = static_cast<size_t>(num_seqs) * num_heads;
  const size_t row = static_cast<size_t>(seq) * num_heads + head;

  float global_max = negative_infinity();
  for (int p = static_cast<int>(threadIdx.x); p < count; p += kMergeWarps * kWarpSize) {
    global_max = fmaxf(global_max, partial_stats[p * partition_stride + row].x);
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    global_max = fmaxf(global_max, __shfl_xor_sync(0xffffffffu, global_max, offset));
  }
  if (lane == 0) warp_values[warp] = global_max;
  __syncthreads();
  global_max = warp_values[0];
#pragma unroll
  for (int w = 1; w < kMergeWarps; ++w) global_max = fmaxf(global_max, warp_values[w]);
  __syncthreads();  // warp_values is reused for the sums below

  // Warp w sums partitions w, w + 8, ...; lane l owns float4 columns l and l + 32.
  const int column_vectors = head_size / 4;
  float4 acc[2] = {make_float4(0.0f, 0.0f, 0.0f, 0.0f), make_float4(0.0f, 0.0f, 0.0f, 0.0f)};
  float total = 0.0f;
#pragma unroll 4
  for (int p = warp; p < count; p += kMergeWarps) {
    const size_t partial_row = p * partition_stride + row;
    const float2 stats = partial_stats[partial_row];
    const float weight = exp2f(stats.x - global_max);
    total += weight * stats.y;
    const float4* o = reinterpret_cast<const float4*>(partial_out + partial_row * head_size);
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int column = lane + c * kWarpSize;
      if (column < column_vectors) acc[c] = scaled_add(acc[c], weight, o[column]);
    }
  }
  if (lane == 0) warp_values[warp] = total;
#pragma unroll
  for (int c = 0; c < 2; ++c) {
    const int column = lane + c * kWarpSize;
    if (column < column_vectors) warp_rows[warp][column] = acc[c];
  }
  __syncthreads();

  for (int column = static_cast<int>(threadIdx.x); column < column_vectors;
       column += kMergeWarps * kWarpSize) {
    float sum = 0.0f;
    float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int w = 0; w < kMergeWarps; ++w) {
      sum += warp_values[w];
      o = scaled_add(o, 1.0f, warp_rows[w][column]);
    }
    *reinterpret_cast<uint2*>(out + row * head_size + column * 4) = to_bf16x4(o, 1.0f / sum);
  }
}

// Any head_size (a multiple of 8, at most 256) and any grouping: one block per (head,
// sequence), 128 threads, no split. A token is handled by a group of lanes, one 16-byte vector
// each (the group is the power of two >= head_size / 8), so a warp covers 32 / group tokens at
// a time; each group keeps an online softmax, merged across groups and warps at the end.
extern "C" __global__ void __launch_bounds__(kThreads) paged_decode_attention_any(
    __nv_bfloat16* __restrict__ out, const __nv_bfloat16* __restrict__ query,
    const __nv_bfloat16* __restrict__ key_cache, const __nv_bfloat16* __restrict__ value_cache,
    const int* __restrict__ block_tables, const int* __restrict__ seq_lens, float scale,
    int num_heads, int num_kv_heads, int head_size, int max_blocks_per_seq, int block_size) {
  __shared__ float warp_max[kWarps];
  __shared__ float warp_sum[kWarps];
  __shared__ float warp_rows[kWarps][256];
  const int head = static_cast<int>(blockIdx.x);
  const int seq = static_cast<int>(blockIdx.y);
  const int kv_head = head / (num_heads / num_kv_heads);
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int vectors = head_size / kVectorElems;
  int group = 1;
  while (group < vectors) group *= 2;
  const int tokens_per_warp = kWarpSize / group;
  const int member = lane % group;  // owns vector `member` of its token's row
  const bool owner = member < vectors;
  const int length = min(seq_lens[seq], max_blocks_per_seq * block_size);
  const int* table = block_tables + static_cast<size_t>(seq) * max_blocks_per_seq;
  const float scale_log2 = scale * kLog2e;

  float q[kVectorElems] = {};
  if (owner) {
    const uint4 v = *reinterpret_cast<const uint4*>(
        query + (static_cast<size_t>(seq) * num_heads + head) * head_size + member * 8);
    const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
    for (int e = 0; e < kVectorElems / 2; ++e) {
      const float2 f = __bfloat1622float2(pairs[e]);
      q[2 * e] = f.x * scale_log2;
      q[2 * e + 1] = f.y * scale_log2;
    }
  }

  float running_max = negative_infinity();
  float running_sum = 0.0f;
  float acc[kVectorElems] = {};
  // The loop bound is uniform across the warp, so the shuffles see every lane.
  for (int base = warp * tokens_per_warp; base < length; base += kWarps * tokens_per_warp) {
    const int token = base + lane / group;
    const bool visible = token < length;
    uint4 k = make_uint4(0, 0, 0, 0);
    uint4 v = make_uint4(0, 0, 0, 0);
    if (visible && owner) {
      const size_t row =
          (static_cast<size_t>(table[token / block_size]) * block_size + token % block_size) *
              num_kv_heads +
          kv_head;
      k = *reinterpret_cast<const uint4*>(key_cache + row * head_size + member * 8);
      v = *reinterpret_cast<const uint4*>(value_cache + row * head_size + member * 8);
    }
    const __nv_bfloat162* k_pairs = reinterpret_cast<const __nv_bfloat162*>(&k);
    float dot = 0.0f;
#pragma unroll
    for (int e = 0; e < kVectorElems / 2; ++e) {
      const float2 f = __bfloat1622float2(k_pairs[e]);
      dot += q[2 * e] * f.x + q[2 * e + 1] * f.y;
    }
    for (int offset = group / 2; offset > 0; offset >>= 1) {
      dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    }
    if (visible) {
      const float new_max = fmaxf(running_max, dot);
      const float alpha = exp2f(running_max - new_max);
      const float weight = exp2f(dot - new_max);
      running_sum = running_sum * alpha + weight;
      running_max = new_max;
      const __nv_bfloat162* v_pairs = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
      for (int e = 0; e < kVectorElems / 2; ++e) {
        const float2 f = __bfloat1622float2(v_pairs[e]);
        acc[2 * e] = acc[2 * e] * alpha + weight * f.x;
        acc[2 * e + 1] = acc[2 * e + 1] * alpha + weight * f.y;
      }
    }
  }

  // Merge the token groups of the warp: lanes with the same member index, `group` apart.
  for (int offset = group; offset < kWarpSize; offset <<= 1) {
    const float other_max = __shfl_xor_sync(0xffffffffu, running_max, offset);
    const float other_sum = __shfl_xor_sync(0xffffffffu, running_sum, offset);
    const float new_max = fmaxf(running_max, other_max);
    // Both empty: keep the empty state (exp2(-inf - -inf) would be NaN).
    const float mine = new_max == negative_infinity() ? 0.0f : exp2f(running_max - new_max);
    const float theirs = new_max == negative_infinity() ? 0.0f : exp2f(other_max - new_max);
    running_sum = running_sum * mine + other_sum * theirs;
#pragma unroll
    for (int e = 0; e < kVectorElems; ++e) {
      const float other = __shfl_xor_sync(0xffffffffu, acc[e], offset);
      acc[e] = acc[e] * mine + other * theirs;
    }
    running_max = new_max;
  }
  if (lane == 0) {
    warp_max[warp] = running_max;
    warp_sum[warp] = running_sum;
  }
  if (lane < group && owner) {
#pragma unroll
    for (int e = 0; e < kVectorElems; ++e) warp_rows[warp][member * 8 + e] = acc[e];
  }
  __syncthreads();

  // Warp 0 of the block always has token 0 (length >= 1), so the block max is finite.
  float block_max = warp_max[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) block_max = fmaxf(block_max, warp_max[w]);
  float weights[kWarps];
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    weights[w] = exp2f(warp_max[w] - block_max);
    total += weights[w] * warp_sum[w];
  }
  for (int d = static_cast<int>(threadIdx.x); d < head_size; d += kThreads) {
    float o = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) o += weights[w] * warp_rows[w][d];
    out[(static_cast<size_t>(seq) * num_heads + head) * head_size + d] =
        __float2bfloat16_rn(o / total);
  }
}
