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
// Launch plan: one block of two warpgroups (256 threads) per 128 query rows of one (sequence,
// head), each warpgroup owning 64 rows. blockIdx.x walks the sequences' query tiles in order
// (cdiv(num_tokens, 128) + num_seqs bounds their count; blocks past the last return at once),
// blockIdx.y is the head, so the blocks resident together are tiles of one sequence and head
// and share its keys and values in L2. Dynamic shared memory: the query tile and two stages of
// a 128-key tile and a 128-value tile, 32 KiB each, plus 1 KiB to align the tiles to the
// 1024-byte swizzle pattern: 164864 bytes, one block an SM.
//
// clang-format off
// @launch prefill_attention<<<dim3(cdiv(num_tokens, 128) + num_seqs, num_heads), 256, 164864>>>(out, query, key_cache, value_cache, block_tables, cu_seqlens_q, seq_lens, scale, num_seqs, num_heads, num_kv_heads, block_size, max_blocks_per_seq)
// clang-format on
//
// Design notes (why, for whoever optimises this next):
// - The body is the FlashAttention schedule on Hopper's warpgroup MMA of
//   kernels/diffusion/attention.cu (its notes explain the tiles, the swizzle, the descriptors
//   and the online softmax); what differs here is where rows come from and which keys count.
// - Keys and values are gathered row by row through the block table: each thread looks up the
//   blocks of its eight rows of a tile once and copies the key and the value row from them
//   (cp.async, 16 bytes a copy). Rows past what the tile's queries can see are zero-filled
//   without reading memory.
// - Causality: a tile only reads keys up to the position of its last query row (kv_end), so the
//   blocks of a chunk's early rows stop early; the mask is applied only on the tiles that reach
//   past the position of the block's first row (at most two per block, on the diagonal).
//   Inside a sequence the tiles run last first (the longest first), so short tiles fill the
//   end of the wave.
// - Chunked prefill and decode rows need nothing special: a chunk's rows start at position
//   n_s - q_s, a decode row is a one-row tile that sees its whole context.
// - Measured on the H200 against FlashAttention-2's varlen kernel over the same contexts
//   gathered into its packed layout (bench/results/h200_parity.json): 0.98-1.05 of its time on
//   fresh prompts of 148 to 2048 tokens, 1.14 on the mixed step, 1.17 on the 8192-token prompt
//   and 1.22-1.23 on the 2048-token chunks at 8k and 32k contexts: the longer the key loop,
//   the further behind. Not yet known which of these it is: the block barrier that keeps the
//   two warpgroups in step (softmax never overlaps the other's GEMMs), the per-row gathers
//   (eight table lookups and 32 cp.async a thread per tile, against FlashAttention-2's
//   contiguous rows), or one block an SM.
// - Not done here: splitting long contexts of short chunks over several blocks (a decode row or
//   a short chunk at a 32k context is one block that walks 256 key tiles while others idle;
//   FlashAttention's split-KV), a producer warp issuing TMA gathers, and the intra-warpgroup
//   overlap of softmax and GEMMs of FlashAttention-3 (kernels/diffusion/attention.cu lists
//   them).

#include <cuda_bf16.h>

namespace {

constexpr int kHeadDim = 128;
constexpr int kBlockQ = 128;                         // query rows per block, 64 per warpgroup
constexpr int kBlockKV = 128;                        // key (and value) rows per tile
constexpr int kThreads = 256;                        // two warpgroups
constexpr int kTileBytes = kBlockKV * kHeadDim * 2;  // one 128 x 128 bf16 tile: 32 KiB
constexpr int kHalfBytes = kTileBytes / 2;           // one 64-column half: 128 rows of 128 bytes
constexpr int kSwizzleAtomBytes = 1024;              // 8 rows of 128 bytes
constexpr int kStagePitch = kHeadDim + 8;            // bf16 per row of the epilogue's staging
constexpr float kLog2e = 1.4426950408889634f;
static_assert(kBlockQ == kBlockKV, "one tile loader for the query, key and value tiles");
static_assert(5 * kTileBytes + kSwizzleAtomBytes == 164864, "the launch directive's shared memory");
static_assert(kBlockQ * kStagePitch * 2 <= 2 * kTileBytes, "the output fits in one stage");

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

__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;\n" ::); }

// Waits for this thread's copies, then makes them visible to the async proxy (wgmma's reads);
// a block barrier must follow before another thread's wgmma reads them.
__device__ __forceinline__ void wait_copies_for_wgmma() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Copies 128 rows of 128 bf16 into the swizzled tile at shared address `tile` (1024-byte
// aligned): 16-byte chunk c of row r goes to half c / 8, row r, chunk (c % 8) ^ (r % 8).
// row_source(k, r) is row r's first element, or nullptr for a row to zero-fill (nothing is
// read); r = t / 16 + 16 k for thread t, which copies chunk t % 16 of those rows (sixteen
// consecutive threads copy one 256-byte row).
template <typename RowSource>
__device__ __forceinline__ void load_tile(unsigned tile, const __nv_bfloat16* mapped,
                                          RowSource row_source) {
  const int chunk = static_cast<int>(threadIdx.x) % 16;
  const int row = static_cast<int>(threadIdx.x) / 16;  // rows row + 16 k, all with row % 8
  const unsigned swizzled = (chunk / 8) * kHalfBytes + row * 128 + (((chunk % 8) ^ (row % 8)) << 4);
#pragma unroll
  for (int k = 0; k < kBlockKV / 16; ++k) {
    const __nv_bfloat16* source = row_source(k, row + 16 * k);
    const bool valid = source != nullptr;
    copy_async_16(tile + swizzled + k * 16 * 128, valid ? source + chunk * 8 : mapped, valid);
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

__device__ __forceinline__ void wgmma_commit_and_wait() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
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

// out, query: [num_tokens, num_heads, 128]; key_cache, value_cache: [num_blocks, block_size,
// num_kv_heads, 128], all bf16, row-major, 256-byte aligned; block_tables [num_seqs,
// max_blocks_per_seq], cu_seqlens_q [num_seqs + 1], seq_lens [num_seqs], int32.
// Launch: grid (cdiv(num_tokens, 128) + num_seqs, num_heads), 256 threads, 164864 bytes of
// dynamic shared memory; blocks past the last query tile return at once.
extern "C" __global__ void __launch_bounds__(kThreads, 1)
    prefill_attention(__nv_bfloat16* __restrict__ out, const __nv_bfloat16* __restrict__ query,
                      const __nv_bfloat16* __restrict__ key_cache,
                      const __nv_bfloat16* __restrict__ value_cache,
                      const int* __restrict__ block_tables, const int* __restrict__ cu_seqlens_q,
                      const int* __restrict__ seq_lens, float scale, int num_seqs, int num_heads,
                      int num_kv_heads, int block_size, int max_blocks_per_seq) {
  // This block's sequence and query tile: blockIdx.x counts the query tiles of the sequences
  // in order. Inside a sequence the tiles are taken last first: later rows see more keys, and
  // the longest blocks should start first.
  int seq = 0, q_start = 0, q_len = 0, q_tile = static_cast<int>(blockIdx.x);
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
  const int context = seq_lens[seq];
  const int position0 = context - q_len;  // position of the sequence's first query row
  const int q0 = q_tile * kBlockQ;
  const int rows = min(kBlockQ, q_len - q0);  // query rows of this tile inside the sequence
  // Keys this tile's rows can see: up to the position of its last row.
  const int kv_end = position0 + q0 + rows;
  const int kv_tiles = (kv_end + kBlockKV - 1) / kBlockKV;

  extern __shared__ __align__(16) unsigned char shared_storage[];
  // Tiles start at the first 1024-byte boundary: the query tile, then stage s's key tile at
  // (1 + 2 s) tiles and its value tile at (2 + 2 s).
  const unsigned base = (shared_address(shared_storage) + kSwizzleAtomBytes - 1) &
                        ~static_cast<unsigned>(kSwizzleAtomBytes - 1);
  unsigned char* const base_pointer = shared_storage + (base - shared_address(shared_storage));
  const unsigned q_smem = base;

  const int head = static_cast<int>(blockIdx.y);
  const int kv_head = head / (num_heads / num_kv_heads);
  const long long row_stride = static_cast<long long>(num_heads) * kHeadDim;
  const __nv_bfloat16* const q_rows = query + (static_cast<long long>(q_start) + q0) * row_stride +
                                      static_cast<long long>(head) * kHeadDim;
  const int* const table = block_tables + static_cast<long long>(seq) * max_blocks_per_seq;
  const long long token_stride = static_cast<long long>(num_kv_heads) * kHeadDim;

  // Key j's row in a cache: its block from the block table, its slot in the block.
  auto cache_row = [&](const __nv_bfloat16* cache, int j) {
    const int block = table[j / block_size];
    return cache + (static_cast<long long>(block) * block_size + j % block_size) * token_stride +
           static_cast<long long>(kv_head) * kHeadDim;
  };
  auto load_kv = [&](int tile) {
    const unsigned stage = base + (1 + 2 * (tile & 1)) * kTileBytes;
    const int kv0 = tile * kBlockKV;
    // The block-table lookups are shared by the key and the value copies of a row.
    long long offsets[kBlockKV / 16];
    const int row = static_cast<int>(threadIdx.x) / 16;
#pragma unroll
    for (int k = 0; k < kBlockKV / 16; ++k) {
      const int j = kv0 + row + 16 * k;
      offsets[k] = j < kv_end ? cache_row(key_cache, j) - key_cache : -1;
    }
    load_tile(stage, key_cache,
              [&](int k, int) { return offsets[k] >= 0 ? key_cache + offsets[k] : nullptr; });
    load_tile(stage + kTileBytes, value_cache,
              [&](int k, int) { return offsets[k] >= 0 ? value_cache + offsets[k] : nullptr; });
  };
  load_tile(q_smem, query,
            [&](int, int r) { return r < rows ? q_rows + r * row_stride : nullptr; });
  load_kv(0);
  commit_copies();

  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warp = static_cast<int>(threadIdx.x) / 32;  // rows 16 warp .. 16 warp + 15
  const int warpgroup = warp / 4;                       // rows 64 warpgroup .. + 63
  // This warpgroup's 64 query rows: 8 swizzle atoms into each half of the query tile.
  const unsigned q_group = q_smem + warpgroup * 64 * 128;

  // Accumulator layout (m64nN, per warp 16 rows): element 4 i + e of lane l is row
  // 16 warp + l / 4 + 8 (e / 2), column 8 i + 2 (l % 4) + e % 2. "Row half" r is e / 2.
  float o[64];
  float s[64];
  float row_max[2] = {__int_as_float(0xff800000), __int_as_float(0xff800000)};  // raw scores
  float row_sum[2] = {0.0f, 0.0f};  // this lane's share of the row's exponentials
#pragma unroll
  for (int e = 0; e < 64; ++e) {
    o[e] = 0.0f;
    s[e] = 0.0f;  // overwritten by the first k16 step of every tile (it does not accumulate)
  }
  const float scale_log2 = scale * kLog2e;
  // Positions of this lane's two rows (row halves 0 and 1).
  const int row_position[2] = {position0 + q0 + warp * 16 + lane / 4,
                               position0 + q0 + warp * 16 + lane / 4 + 8};

  for (int tile = 0; tile < kv_tiles; ++tile) {
    wait_copies_for_wgmma();  // this thread's copies of tile `tile` have landed
    __syncthreads();          // everyone's have, and everyone is done with tile - 1's stage
    if (tile + 1 < kv_tiles) {
      load_kv(tile + 1);
      commit_copies();
    }
    const unsigned k_tile = base + (1 + 2 * (tile & 1)) * kTileBytes;
    const unsigned v_tile = k_tile + kTileBytes;

    // S = Q K^T: k16 step kk reads columns 16 kk .. 16 kk + 15, in half kk / 4 at byte
    // 32 (kk % 4) of each 128-byte row.
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 16; ++kk) {
      const unsigned column = (kk / 4) * kHalfBytes + (kk % 4) * 32;
      wgmma_scores(s, descriptor(q_group + column, 16, kSwizzleAtomBytes),
                   descriptor(k_tile + column, 16, kSwizzleAtomBytes), kk > 0);
    }
    wgmma_commit_and_wait();

    // The causal mask, on the tiles that reach past the block's first row position: key j is
    // visible to a row at position p when j <= p and j < kv_end (rows past the sequence's end,
    // never stored, see up to kv_end). Key 0 is visible to every row, so after the first
    // tile every row maximum is finite.
    const int kv0 = tile * kBlockKV;
    if (kv0 + kBlockKV - 1 > position0 + q0) {
#pragma unroll
      for (int e = 0; e < 64; ++e) {
        const int j = kv0 + (e / 4) * 8 + (lane % 4) * 2 + e % 2;
        if (j > row_position[(e % 4) / 2] || j >= kv_end) s[e] = __int_as_float(0xff800000);
      }
    }

    // Online softmax: new row maxima (finite: the first tile holds key 0, visible to every row;
    // a later tile masked whole for a row leaves its maximum as it was and adds 2^-inf = 0),
    // rescale what was accumulated (2^-inf = 0 on the first tile), exponentials.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float m = row_max[r];
#pragma unroll
      for (int i = 0; i < 16; ++i) m = fmaxf(m, fmaxf(s[4 * i + 2 * r], s[4 * i + 2 * r + 1]));
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
      const float rescale = exp2_approx((row_max[r] - m) * scale_log2);
      row_max[r] = m;
      const float m_scaled = m * scale_log2;
      float sum = row_sum[r] * rescale;
#pragma unroll
      for (int i = 0; i < 16; ++i) {
#pragma unroll
        for (int e = 4 * i + 2 * r; e < 4 * i + 2 * r + 2; ++e) {
          s[e] = exp2_approx(fmaf(s[e], scale_log2, -m_scaled));
          sum += s[e];
        }
        o[4 * i + 2 * r] *= rescale;
        o[4 * i + 2 * r + 1] *= rescale;
      }
      row_sum[r] = sum;
    }

    // O += P V: k16 step t takes keys 16 t .. 16 t + 15, the score chunks 2 t and 2 t + 1,
    // and the value rows 16 t .. 16 t + 15 (two 8-key groups of 1024 bytes, 2048 bytes a step).
    // Every A operand is packed before the fence, so that no register an in-flight wgmma reads
    // is written between the wgmmas (ptxas would otherwise serialise them).
    unsigned p[kBlockKV / 16][4];
#pragma unroll
    for (int t = 0; t < kBlockKV / 16; ++t) {
#pragma unroll
      for (int j = 0; j < 4; ++j) p[t][j] = pack_bf16(s[8 * t + 2 * j], s[8 * t + 2 * j + 1]);
    }
    wgmma_fence();
#pragma unroll
    for (int t = 0; t < kBlockKV / 16; ++t) {
      wgmma_values(o, p[t],
                   descriptor(v_tile + t * 2 * kSwizzleAtomBytes, kHalfBytes, kSwizzleAtomBytes));
    }
    wgmma_commit_and_wait();
  }

  // Epilogue: full row sums (the quad's four shares), normalise, round to bf16, stage in the
  // first stage's key tile (free once every warpgroup is past the loop), then 16-byte stores
  // of the rows inside the sequence.
  __syncthreads();
  __nv_bfloat16* const staged = reinterpret_cast<__nv_bfloat16*>(base_pointer + kTileBytes);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float total = row_sum[r];
    total += __shfl_xor_sync(0xffffffffu, total, 1);
    total += __shfl_xor_sync(0xffffffffu, total, 2);
    const float inverse = 1.0f / total;
    const int row = warp * 16 + r * 8 + lane / 4;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      *reinterpret_cast<unsigned*>(staged + row * kStagePitch + i * 8 + (lane % 4) * 2) =
          pack_bf16(o[4 * i + 2 * r] * inverse, o[4 * i + 2 * r + 1] * inverse);
    }
  }
  __syncthreads();
  __nv_bfloat16* const out_rows = out + (static_cast<long long>(q_start) + q0) * row_stride +
                                  static_cast<long long>(head) * kHeadDim;
#pragma unroll
  for (int k = 0; k < kBlockQ * 16 / kThreads; ++k) {
    const int chunk = static_cast<int>(threadIdx.x) + k * kThreads;
    const int row = chunk / 16;
    const int column = (chunk % 16) * 8;
    if (row < rows) {
      *reinterpret_cast<uint4*>(out_rows + static_cast<long long>(row) * row_stride + column) =
          *reinterpret_cast<const uint4*>(staged + row * kStagePitch + column);
    }
  }
}
