// Reference for llm/flash_attn_varlen_prefill: causal prefill attention of packed query chunks
// over vLLM's paged KV cache (flash layout), grouped-query heads, head size 128, bf16: what
// vLLM's FlashAttention backend computes with flash_attn_varlen_func(q, k_cache, v_cache,
// cu_seqlens_q, seqused_k, block_table, causal=True).
//
// Device code only, compiled by NVRTC for sm_90a and launched as the directive below says (see
// kernels/llm/rms_norm.cu for the conventions). For sequence s with q_s query rows (packed from
// cu_seqlens_q[s]) and n_s = seq_lens[s] context tokens, query row i sits at position
// p = n_s - q_s + i and attends to keys j <= p of its sequence, read through block_tables:
//
//   out[r, h, :] = sum_{j <= p} softmax_j(scale * query[r, h, :] . K_s[j, g, :]) V_s[j, g, :]
//
// with g = h / (num_heads / num_kv_heads), the dot products, the softmax and the weighted sum in
// fp32 and one rounding to bf16 at the end.
//
// Launch plan: one block of three warpgroups (384 threads) per 128 query rows of one (sequence,
// head), or of one (sequence, kv head) for short segments (design notes): a producer warpgroup that
// gathers the tiles into shared memory and two consumer warpgroups of 64 query rows each.
// blockIdx.x is the head and blockIdx.y walks the sequences' query tiles in order, the longest
// (last) tile of each sequence first (cdiv(num_tokens, 128) + num_seqs bounds their count; blocks
// past the last return at once). Blocks start in that order, every head's tile before the next
// tile: the longest work starts first and the last wave holds the shortest tiles; the blocks
// resident together read a few tiles' keys and values of every head, from L2. Dynamic shared
// memory: the query tile and two stages of a 128-key tile and a 128-value tile, 32 KiB each, 1 KiB
// to align the tiles to the 1024-byte swizzle pattern, 128 bytes of barriers and 2 KiB of the
// producer's row offsets: 167040 bytes, one block an SM.
//
// clang-format off
// @launch prefill_attention<<<dim3(num_heads, cdiv(num_tokens, 128) + num_seqs), 384, 167040>>>(out, query, key_cache, value_cache, block_tables, cu_seqlens_q, seq_lens, scale, num_seqs, num_heads, num_kv_heads, block_size, max_blocks_per_seq)
// clang-format on
//
// Design notes (why, for whoever optimises this next):
// - The body is the warp-specialised FlashAttention schedule of kernels/diffusion/attention.cu
//   (its notes explain the tiles, the swizzle, the descriptors, the producer's mbarriers, the
//   consumers' ping-pong and the online softmax); what differs here is where rows come from
//   and which keys count.
// - Keys and values are gathered row by row through the block table: each producer thread
//   looks up one row's block of a tile into shared memory (2 KiB of row offsets, one buffer a
//   stage), the producer's own named barrier (3) publishes them, and each thread then copies
//   its sixteen rows' keys and values from them (cp.async, 16 bytes a copy). Rows past what
//   the tile's queries can see are zero-filled without reading memory. The lookups are the
//   producer's bottleneck: each thread doing its sixteen rows' own (a division and a table
//   load each) made the whole kernel 1.83x slower (h200_reference_variants_attention.json).
// - Causality: a tile only reads keys up to the position of its last query row (kv_end), so the
//   blocks of a chunk's early rows stop early; the mask is applied only on the tiles that reach
//   past the position of the block's first row (at most two per block, on the diagonal).
//   Inside a sequence the tiles run last first (the longest first), so short tiles fill the
//   end of the wave. Both consumers walk the same tiles (the ping-pong needs as many turns on
//   each side); a tile masked whole for one consumer's rows adds nothing to them.
// - Chunked prefill needs nothing special: a chunk's rows start at position n_s - q_s.
// - Short segments (q_s * group <= 128 rows, group = num_heads / num_kv_heads: decode rows,
//   short chunks) pack every query head of a kv head into one tile, as FlashInfer and
//   FlashAttention-3 do ("pack GQA"): row r of the tile is query row r / group of head
//   (kv head * group + r % group), the block of the group's first head does the work and the
//   others return at once. A decode row then costs one block walking its keys per kv head
//   instead of one per query head (the mixed step's 32 decode rows: 256 blocks instead of
//   1024, each doing the same tensor-core work for 4 useful rows instead of 1). Packed and
//   unpacked tiles are two instances of one template (attend_tile<kPacked>), so the long
//   segments' code carries none of the packed indexing: written with the choice at run time
//   inside one body, the packing made the mixed step 1.34x faster and every other visible case
//   0.93-0.98x; as two instances, the mixed step 1.36x and the others within 0.7 % of the
//   unpacked kernel (h200_reference_variants.json, 2026-12-05: one_head_a_tile).
// - Measured on the H200 (h200_reference_variants_attention.json): 1.32-1.62x the speed of
//   the block-barrier design (both warpgroups loading and computing in step), the longer the
//   key loop the more; starting every head's longest tile first instead of each head's tiles
//   in turn, 1.005-1.18x more. Against FlashInfer's paged prefill (its FlashAttention-3
//   kernels), side by side in one run (h200_parity.json, 2026-12-05): 1.00-1.04x on fresh
//   prompts up to 2048 tokens, 0.91x on the mixed step (1.23x before short segments were
//   packed), 1.14-1.24x on the 8192-token prompt and the 2048-token chunks of 8k and 32k
//   contexts: the longer the key loop, the further behind, as diffusion/attention is on its
//   long sequences.
// - Tried and measured slower: a persistent grid (132 blocks each taking every 132nd work tile,
//   the producer loading the next tile's keys and query while the consumers store the last
//   one's output) ran at 0.918x this kernel's speed: a static share of causal tiles of unequal
//   length balances worse than the hardware handing the next block to the first free SM.
// - Not done here: splitting long contexts of short chunks over several blocks (a decode row or
//   a short chunk at a 32k context is one block that walks 256 key tiles while others idle;
//   FlashAttention's split-KV), a persistent grid with a dynamic (atomic) tile counter, and TMA
//   gathers.

#include <cuda_bf16.h>

namespace {

constexpr int kHeadDim = 128;
constexpr int kBlockQ = 128;                         // query rows per block, 64 per consumer
constexpr int kBlockKV = 128;                        // key (and value) rows per tile
constexpr int kThreads = 384;                        // producer warpgroup + two consumers
constexpr int kStages = 2;                           // key/value tiles in flight
constexpr int kTileBytes = kBlockKV * kHeadDim * 2;  // one 128 x 128 bf16 tile: 32 KiB
constexpr int kHalfBytes = kTileBytes / 2;           // one 64-column half: 128 rows of 128 bytes
constexpr int kSwizzleAtomBytes = 1024;              // 8 rows of 128 bytes
constexpr int kBarrierBytes = 128;
constexpr int kOffsetBytes = kStages * kBlockKV * 8;  // the producer's row offsets per stage
constexpr float kLog2e = 1.4426950408889634f;
static_assert((1 + 2 * kStages) * kTileBytes + kSwizzleAtomBytes + kBarrierBytes + kOffsetBytes ==
                  167040,
              "the launch directive's shared memory");

__device__ __forceinline__ unsigned shared_address(const void* pointer) {
  return static_cast<unsigned>(__cvta_generic_to_shared(pointer));
}

// 16-byte global -> shared copy that bypasses L1. With `valid` false nothing is read (src-size
// 0) and the 16 bytes are zero-filled; `source` must still be a mapped address.
__device__ __forceinline__ void copy_async_16(unsigned destination, const void* source,
                                              bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(destination), "l"(source),
               "r"(valid ? 16 : 0));
}

// The barrier at `bar` gets one arrival once every copy this thread issued before has landed.
__device__ __forceinline__ void arrive_when_copied(unsigned bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void barrier_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void barrier_arrive(unsigned bar) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(bar)
               : "memory");
}

__device__ __forceinline__ void barrier_wait(unsigned bar, unsigned parity) {
  unsigned done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// Tiles written through the generic proxy (cp.async), read by wgmma through the async proxy.
__device__ __forceinline__ void fence_for_wgmma() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Named barriers 1 and 2 of the two consumers' turns (256 threads: one consumer syncs, the
// other arrives).
__device__ __forceinline__ void named_sync(int id) {
  asm volatile("bar.sync %0, 256;\n" ::"r"(id) : "memory");
}

__device__ __forceinline__ void named_arrive(int id) {
  asm volatile("bar.arrive %0, 256;\n" ::"r"(id) : "memory");
}

// Copies 128 rows of 128 bf16 into the swizzled tile at shared address `tile` (1024-byte
// aligned) with the producer's 128 threads: 16-byte chunk c of row r goes to half c / 8, row r,
// chunk (c % 8) ^ (r % 8). Thread t copies chunk t % 16 of rows t / 16 + 8 k; row_source(k) is
// its k-th row's first element, or nullptr for a row to zero-fill (nothing is read).
template <typename RowSource>
__device__ __forceinline__ void load_tile(unsigned tile, const __nv_bfloat16* mapped, int thread,
                                          RowSource row_source) {
  const int chunk = thread % 16;
  const int row = thread / 16;  // 0 .. 7: every row it copies has this row % 8
  const unsigned swizzled = (chunk / 8) * kHalfBytes + row * 128 + (((chunk % 8) ^ row) << 4);
#pragma unroll
  for (int k = 0; k < kBlockKV / 8; ++k) {
    const __nv_bfloat16* source = row_source(k);
    const bool valid = source != nullptr;
    copy_async_16(tile + swizzled + k * 8 * 128, valid ? source + chunk * 8 : mapped, valid);
  }
}

// A wgmma shared-memory descriptor with the 128-byte swizzle: start address, leading and stride
// byte offsets (each stored >> 4), swizzle mode 1 in bits 62-63, base offset 0 (every pattern
// starts 1024-byte aligned).
__device__ __forceinline__ unsigned long long descriptor(unsigned address, unsigned leading_bytes,
                                                         unsigned stride_bytes) {
  return static_cast<unsigned long long>((address & 0x3FFFF) >> 4) |
         (static_cast<unsigned long long>(leading_bytes >> 4) << 16) |
         (static_cast<unsigned long long>(stride_bytes >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps a register the compiler must not move or reuse while a wgmma may still read or write it.
__device__ __forceinline__ void hold(float& x) { asm volatile("" : "+f"(x)::"memory"); }
__device__ __forceinline__ void hold(unsigned& x) { asm volatile("" : "+r"(x)::"memory"); }
template <int N>
__device__ __forceinline__ void hold(float (&x)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) hold(x[i]);
}
template <int M, int N>
__device__ __forceinline__ void hold(unsigned (&x)[M][N]) {
#pragma unroll
  for (int i = 0; i < M; ++i) {
#pragma unroll
    for (int j = 0; j < N; ++j) hold(x[i][j]);
  }
}

// d (64 x 128 per warpgroup, fp32) = (accumulate ? d : 0) + a (64 x 16, shared, K-major) *
// b (16 x 128, shared, K-major: rows of keys), bf16 inputs.
__device__ __forceinline__ void wgmma_scores(float (&d)[64], unsigned long long a_desc,
                                             unsigned long long b_desc, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
      "%9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, "
      "%27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, "
      "%45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, "
      "%63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63])
      : "l"(a_desc), "l"(b_desc), "r"(accumulate));
}

// d (64 x 128 per warpgroup, fp32) += a (64 x 16, registers) * b (16 x 128, shared, MN-major:
// rows of keys, the N = 128 columns contiguous), bf16 inputs.
__device__ __forceinline__ void wgmma_values(float (&d)[64], const unsigned (&a)[4],
                                             unsigned long long b_desc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
      "%9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, "
      "%27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, "
      "%45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, "
      "%63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(1));
}

// 2^x (MUFU.EX2, relative error about 2^-22); 2^-inf = 0.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Two floats rounded to bf16 (nearest even) in one register, `low` in the low half: the
// element of the smaller column, as MMA fragments order them.
__device__ __forceinline__ unsigned pack_bf16(float low, float high) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(low, high);
  return *reinterpret_cast<const unsigned*>(&pair);
}

}  // namespace

// One block's work: query tile q_tile of sequence seq (q_len rows from q_start) for head
// blockIdx.x, or, kPacked, for every head of the kv head's group (see the launch plan).
template <bool kPacked>
__device__ __forceinline__ void attend_tile(
    __nv_bfloat16* __restrict__ out, const __nv_bfloat16* __restrict__ query,
    const __nv_bfloat16* __restrict__ key_cache, const __nv_bfloat16* __restrict__ value_cache,
    const int* __restrict__ block_tables, const int* __restrict__ seq_lens, float scale,
    int num_heads, int num_kv_heads, int block_size, int max_blocks_per_seq, int seq, int q_start,
    int q_len, int q_tile) {
  const int group = num_heads / num_kv_heads;
  const int context = seq_lens[seq];
  const int position0 = context - q_len;  // position of the sequence's first query row
  const int q0 = q_tile * kBlockQ;
  // Query rows of this tile inside the sequence, and the query positions they are.
  const int positions = kPacked ? q_len : min(kBlockQ, q_len - q0);
  const int rows = kPacked ? q_len * group : positions;
  // Keys this tile's rows can see: up to the position of its last row.
  const int kv_end = position0 + q0 + positions;
  const int kv_tiles = (kv_end + kBlockKV - 1) / kBlockKV;

  extern __shared__ __align__(16) unsigned char shared_storage[];
  // Tiles start at the first 1024-byte boundary: the query tile, then stage s's key tile at
  // (1 + 2 s) tiles and its value tile at (2 + 2 s); the barriers after them.
  const unsigned base = (shared_address(shared_storage) + kSwizzleAtomBytes - 1) &
                        ~static_cast<unsigned>(kSwizzleAtomBytes - 1);
  const unsigned q_smem = base;
  const unsigned barriers = base + (1 + 2 * kStages) * kTileBytes;
  const unsigned full_q = barriers;
  auto full_k = [&](int s) { return barriers + 8 * (1 + s); };
  auto full_v = [&](int s) { return barriers + 8 * (1 + kStages + s); };
  auto empty_k = [&](int s) { return barriers + 8 * (1 + 2 * kStages + s); };
  auto empty_v = [&](int s) { return barriers + 8 * (1 + 3 * kStages + s); };
  auto k_tile = [&](int s) { return base + (1 + 2 * s) * kTileBytes; };
  auto v_tile = [&](int s) { return base + (2 + 2 * s) * kTileBytes; };
  if (threadIdx.x == 0) {
    barrier_init(full_q, 128);
    for (int s = 0; s < kStages; ++s) {
      barrier_init(full_k(s), 128);
      barrier_init(full_v(s), 128);
      barrier_init(empty_k(s), 8);  // one arrival per consumer warp
      barrier_init(empty_v(s), 8);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  const int head = static_cast<int>(blockIdx.x);
  const long long row_stride = static_cast<long long>(num_heads) * kHeadDim;
  const int warpgroup = static_cast<int>(threadIdx.x) / 128;

  if (warpgroup == 0) {
    // Producer: the query tile, then every key and value tile through the stages, each row
    // gathered through the block table.
    asm volatile("setmaxnreg.dec.sync.aligned.u32 56;\n");
    const int thread = static_cast<int>(threadIdx.x);
    const int kv_head = head / (num_heads / num_kv_heads);
    const __nv_bfloat16* const q_rows = query +
                                        (static_cast<long long>(q_start) + q0) * row_stride +
                                        static_cast<long long>(head) * kHeadDim;
    const int* const table = block_tables + static_cast<long long>(seq) * max_blocks_per_seq;
    const long long token_stride = static_cast<long long>(num_kv_heads) * kHeadDim;
    const int row = thread / 16;  // this thread copies rows row + 8 k of every tile
    load_tile(q_smem, query, thread, [&](int k) {
      const int r = row + 8 * k;
      if (r >= rows) return static_cast<const __nv_bfloat16*>(nullptr);
      return kPacked ? q_rows + (r / group) * row_stride + (r % group) * kHeadDim
                     : q_rows + r * row_stride;
    });
    arrive_when_copied(full_q);
    // Row offsets of a stage's tile (elements into a cache, -1: not visible), one row a thread.
    long long* const offsets = reinterpret_cast<long long*>(
        shared_storage + (barriers + kBarrierBytes - shared_address(shared_storage)));
    for (int tile = 0; tile < kv_tiles; ++tile) {
      const int s = tile % kStages;
      const unsigned reuse = ((tile / kStages) + 1) & 1;  // parity of the consumers' release
      // Key j's row in a cache: its block from the block table, its slot in the block. Each
      // thread looks up one row; the key and the value copies of a row share it.
      const int j = tile * kBlockKV + thread;
      offsets[s * kBlockKV + thread] =
          j < kv_end
              ? (static_cast<long long>(table[j / block_size]) * block_size + j % block_size) *
                        token_stride +
                    static_cast<long long>(kv_head) * kHeadDim
              : -1;
      // The producer's own barrier: every row's offset is written (and, the stage's previous
      // offsets having been read before the last one, may be overwritten next time).
      asm volatile("bar.sync 3, 128;\n" ::: "memory");
      const long long* const tile_offsets = offsets + s * kBlockKV + row;
      if (tile >= kStages) barrier_wait(empty_k(s), reuse);
      load_tile(k_tile(s), key_cache, thread, [&](int k) {
        const long long offset = tile_offsets[8 * k];
        return offset >= 0 ? key_cache + offset : nullptr;
      });
      arrive_when_copied(full_k(s));
      if (tile >= kStages) barrier_wait(empty_v(s), reuse);
      load_tile(v_tile(s), value_cache, thread, [&](int k) {
        const long long offset = tile_offsets[8 * k];
        return offset >= 0 ? value_cache + offset : nullptr;
      });
      arrive_when_copied(full_v(s));
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 224;\n");
  const int consumer = warpgroup - 1;  // rows 64 consumer .. + 63 of the tile
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warp = static_cast<int>(threadIdx.x) / 32 % 4;  // rows 16 warp .. + 15 of its 64
  const unsigned q_group = q_smem + consumer * 64 * 128;
  const int my_turn = 1 + consumer;     // named barrier this consumer waits on to issue
  const int their_turn = 2 - consumer;  // the other's

  float o[64];
  float s[64];
  unsigned p[kBlockKV / 16][4];
  float row_max[2] = {__int_as_float(0xff800000), __int_as_float(0xff800000)};  // raw scores
  float row_sum[2] = {0.0f, 0.0f};  // this lane's share of the row's exponentials
#pragma unroll
  for (int e = 0; e < 64; ++e) {
    o[e] = 0.0f;
    s[e] = 0.0f;  // overwritten by the first k16 step of every tile (it does not accumulate)
  }
  const float scale_log2 = scale * kLog2e;
  // Positions of this lane's two rows (row halves 0 and 1).
  const int first_row = consumer * 64 + warp * 16 + lane / 4;
  const int row_position[2] = {
      position0 + q0 + (kPacked ? first_row / group : first_row),
      position0 + q0 + (kPacked ? (first_row + 8) / group : first_row + 8)};

  barrier_wait(full_q, 0);
  if (consumer == 1) named_arrive(1);  // consumer 0 issues first

  // Accumulator layout (m64nN, per warp 16 rows): element 4 i + e of lane l is row
  // 16 warp + l / 4 + 8 (e / 2), column 8 i + 2 (l % 4) + e % 2. "Row half" r is e / 2.
  // Scores of tile `tile` into s (issued, not waited for): k16 step kk reads columns 16 kk ..
  // 16 kk + 15, in half kk / 4 at byte 32 (kk % 4) of each 128-byte row.
  auto issue_scores = [&](int tile) {
    const unsigned k = k_tile(tile % kStages);
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 16; ++kk) {
      const unsigned column = (kk / 4) * kHalfBytes + (kk % 4) * 32;
      wgmma_scores(s, descriptor(q_group + column, 16, kSwizzleAtomBytes),
                   descriptor(k + column, 16, kSwizzleAtomBytes), kk > 0);
    }
  };
  // O += P V of tile `tile` (issued, not waited for): k16 step t takes keys 16 t .. 16 t + 15,
  // the score chunks 2 t and 2 t + 1 and the value rows 16 t .. 16 t + 15 (two 8-key groups of
  // 1024 bytes, 2048 bytes a step).
  auto issue_values = [&](int tile) {
    const unsigned v = v_tile(tile % kStages);
#pragma unroll
    for (int t = 0; t < kBlockKV / 16; ++t) {
      wgmma_values(o, p[t],
                   descriptor(v + t * 2 * kSwizzleAtomBytes, kHalfBytes, kSwizzleAtomBytes));
    }
  };
  auto release = [&](unsigned bar) {
    __syncwarp();
    if (lane == 0) barrier_arrive(bar);
  };
  // The causal mask, then the online softmax of tile `tile`'s scores in s: the new row maxima,
  // the factor what was accumulated so far must be rescaled by (rescale), the exponentials in
  // s. Key j is visible to a row at position p when j <= p and j < kv_end (rows past the
  // sequence's end, never stored, see up to kv_end); only the tiles that reach past the
  // block's first row position check. Key 0 is visible to every row, so after the first tile
  // every row maximum is finite, and a later tile masked whole for a row leaves its maximum as
  // it was and adds 2^-inf = 0.
  auto softmax = [&](int tile, float(&rescale)[2]) {
    const int kv0 = tile * kBlockKV;
    if (kv0 + kBlockKV - 1 > position0 + q0) {
#pragma unroll
      for (int e = 0; e < 64; ++e) {
        const int j = kv0 + (e / 4) * 8 + (lane % 4) * 2 + e % 2;
        if (j > row_position[(e % 4) / 2] || j >= kv_end) s[e] = __int_as_float(0xff800000);
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float m = row_max[r];
#pragma unroll
      for (int i = 0; i < 16; ++i) m = fmaxf(m, fmaxf(s[4 * i + 2 * r], s[4 * i + 2 * r + 1]));
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
      rescale[r] = exp2_approx((row_max[r] - m) * scale_log2);
      row_max[r] = m;
      const float m_scaled = m * scale_log2;
      float sum = row_sum[r] * rescale[r];
#pragma unroll
      for (int i = 0; i < 16; ++i) {
#pragma unroll
        for (int e = 4 * i + 2 * r; e < 4 * i + 2 * r + 2; ++e) {
          s[e] = exp2_approx(fmaf(s[e], scale_log2, -m_scaled));
          sum += s[e];
        }
      }
      row_sum[r] = sum;
    }
  };
  auto pack_scores = [&]() {
#pragma unroll
    for (int t = 0; t < kBlockKV / 16; ++t) {
#pragma unroll
      for (int j = 0; j < 4; ++j) p[t][j] = pack_bf16(s[8 * t + 2 * j], s[8 * t + 2 * j + 1]);
    }
  };
  // O to a new maximum: each row half r times rescale[r].
  auto rescale_o = [&](const float(&rescale)[2]) {
#pragma unroll
    for (int i = 0; i < 16; ++i) {
#pragma unroll
      for (int e = 0; e < 4; ++e) o[4 * i + e] *= rescale[e / 2];
    }
  };

  // The factor O is rescaled by before the next P V: 2^(previous maximum - this tile's).
  float rescale[2];
  // Tile 0: scores only (nothing is accumulated yet).
  {
    barrier_wait(full_k(0), 0);
    fence_for_wgmma();
    named_sync(my_turn);
    wgmma_fence();
    issue_scores(0);
    wgmma_commit();
    if (!(consumer == 1 && kv_tiles == 1)) named_arrive(their_turn);
    wgmma_wait<0>();
    hold(s);
    release(empty_k(0));
    softmax(0, rescale);
    pack_scores();
  }
  // Tile t: its scores, and behind them the previous tile's O += P V, issued in this consumer's
  // turn; the softmax of tile t runs while the other consumer issues.
  for (int tile = 1; tile < kv_tiles; ++tile) {
    const int stage = tile % kStages;
    const int previous = (tile - 1) % kStages;
    barrier_wait(full_k(stage), (tile / kStages) & 1);
    barrier_wait(full_v(previous), ((tile - 1) / kStages) & 1);
    fence_for_wgmma();
    named_sync(my_turn);
    wgmma_fence();
    issue_scores(tile);
    wgmma_commit();
    // O to the previous tile's maximum while the scores run, then its P V on top.
    rescale_o(rescale);
    wgmma_fence();
    issue_values(tile - 1);
    wgmma_commit();
    // The other consumer issues next; the last turn consumer 1 would hand over is never taken.
    if (!(consumer == 1 && tile == kv_tiles - 1)) named_arrive(their_turn);
    wgmma_wait<1>();
    hold(s);
    release(empty_k(stage));
    softmax(tile, rescale);
    wgmma_wait<0>();
    hold(o);
    hold(p);
    release(empty_v(previous));
    pack_scores();
  }
  // The last tile's values.
  {
    const int last = kv_tiles - 1;
    barrier_wait(full_v(last % kStages), (last / kStages) & 1);
    fence_for_wgmma();
    rescale_o(rescale);
    wgmma_fence();
    issue_values(last);
    wgmma_commit();
    wgmma_wait<0>();
    hold(o);
  }

  // Epilogue: full row sums (the quad's four shares), normalise, round to bf16, store the rows
  // inside the sequence.
  __nv_bfloat16* const out_rows = out + (static_cast<long long>(q_start) + q0) * row_stride +
                                  static_cast<long long>(head) * kHeadDim;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float total = row_sum[r];
    total += __shfl_xor_sync(0xffffffffu, total, 1);
    total += __shfl_xor_sync(0xffffffffu, total, 2);
    const float inverse = 1.0f / total;
    const int row = consumer * 64 + warp * 16 + r * 8 + lane / 4;
    if (row < rows) {
      __nv_bfloat16* const destination =
          out_rows +
          (kPacked ? static_cast<long long>(row / group) * row_stride + (row % group) * kHeadDim
                   : static_cast<long long>(row) * row_stride) +
          (lane % 4) * 2;
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        *reinterpret_cast<unsigned*>(destination + i * 8) =
            pack_bf16(o[4 * i + 2 * r] * inverse, o[4 * i + 2 * r + 1] * inverse);
      }
    }
  }
}

// out, query: [num_tokens, num_heads, 128]; key_cache, value_cache: [num_blocks, block_size,
// num_kv_heads, 128], all bf16, row-major, 256-byte aligned; block_tables [num_seqs,
// max_blocks_per_seq], cu_seqlens_q [num_seqs + 1], seq_lens [num_seqs], int32.
// Launch: grid (num_heads, cdiv(num_tokens, 128) + num_seqs), 384 threads, 167040 bytes of
// dynamic shared memory; blocks past the last query tile return at once.
extern "C" __global__ void __launch_bounds__(kThreads, 1)
    prefill_attention(__nv_bfloat16* __restrict__ out, const __nv_bfloat16* __restrict__ query,
                      const __nv_bfloat16* __restrict__ key_cache,
                      const __nv_bfloat16* __restrict__ value_cache,
                      const int* __restrict__ block_tables, const int* __restrict__ cu_seqlens_q,
                      const int* __restrict__ seq_lens, float scale, int num_seqs, int num_heads,
                      int num_kv_heads, int block_size, int max_blocks_per_seq) {
  // This block's sequence and query tile: blockIdx.y counts the query tiles of the sequences
  // in order. Inside a sequence the tiles are taken last first: later rows see more keys, and
  // the longest blocks should start first.
  int seq = 0, q_start = 0, q_len = 0, q_tile = static_cast<int>(blockIdx.y);
  {
    int next_start = cu_seqlens_q[0];
    for (; seq < num_seqs; ++seq) {
      q_start = next_start;
      next_start = cu_seqlens_q[seq + 1];
      q_len = next_start - q_start;
      const int tiles = (q_len + kBlockQ - 1) / kBlockQ;
      if (q_tile < tiles) {
        q_tile = tiles - 1 - q_tile;
        break;
      }
      q_tile -= tiles;
    }
    if (seq == num_seqs) return;
  }
  // Short segments (q_len * group <= 128 rows: decode rows, short chunks) take every query head
  // of the kv head's group in one tile, in the block of the group's first head; the others
  // return at once.
  const int group = num_heads / num_kv_heads;
  if (q_len * group <= kBlockQ) {
    if (static_cast<int>(blockIdx.x) % group != 0) return;
    attend_tile<true>(out, query, key_cache, value_cache, block_tables, seq_lens, scale, num_heads,
                      num_kv_heads, block_size, max_blocks_per_seq, seq, q_start, q_len, q_tile);
  } else {
    attend_tile<false>(out, query, key_cache, value_cache, block_tables, seq_lens, scale, num_heads,
                       num_kv_heads, block_size, max_blocks_per_seq, seq, q_start, q_len, q_tile);
  }
}
