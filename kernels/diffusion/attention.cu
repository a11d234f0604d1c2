// Reference for diffusion/attention: the non-causal multi-head attention of diffusion
// transformers (FLUX.1's joint text-image attention, HunyuanVideo's video attention), bf16.
//
// Device code only, compiled by NVRTC for sm_90a and launched as the directive below says (see
// kernels/llm/rms_norm.cu for the conventions). For every sample b, head h and query token i:
//
//   out[b, i, h, :] = sum_j softmax_j(scale * query[b, i, h, :] . key[b, j, h, :]) value[b, j, h,
//   :]
//
// over every key token j of the same sample (no mask), with the dot products, the softmax and
// the weighted sum in fp32 and one rounding to bf16 at the end. All four tensors are
// [batch, seq_len, num_heads, 128] bf16, row-major: the layout of flash_attn_func and of the
// tensors diffusers' attention dispatcher receives (it permutes them into [B, H, S, D] views for
// torch's scaled_dot_product_attention).
//
// Launch plan: one block of three warpgroups (384 threads) per 128 query rows of one (sample,
// head): a producer warpgroup, one thread of which loads the tiles into shared memory with the
// tensor memory accelerator (the @tensormap maps below: each tensor viewed as
// [batch][seq_len][num_heads][128], a box of 64 columns of 128 rows of one head), and two
// consumer warpgroups of 64 query rows each; blocks that share a head are numbered
// consecutively, so the blocks resident at a time read the same keys and values from L2. Dynamic
// shared memory: the query tile and two stages of a 128-row key tile and a 128-row value tile, 32
// KiB each, 1 KiB to align the tiles to the 1024-byte swizzle pattern and 128 bytes of barriers:
// 164992 bytes, one block an SM.
//
// clang-format off
// @tensormap query_rows query dims(128, num_heads, seq_len, batch) box(64, 1, 128, 1) swizzle(128)
// @tensormap key_rows key dims(128, num_heads, seq_len, batch) box(64, 1, 128, 1) swizzle(128)
// @tensormap value_rows value dims(128, num_heads, seq_len, batch) box(64, 1, 128, 1) swizzle(128)
// @launch attention_forward<<<min(cdiv(seq_len, 128) * num_heads * batch, 132), 384, 164992>>>(out, query_rows, key_rows, value_rows, scale, seq_len, num_heads, batch)
// clang-format on
//
// Design notes (why, for whoever optimises this next):
// - The op is compute bound: 4 * S^2 * 128 flops per (sample, head) against 8 * S * 128 bytes,
//   about S flops a byte (4608 at FLUX's 1024 x 1024). This is the FlashAttention schedule
//   (Dao, arXiv:2205.14135, 2307.08691) on Hopper's warpgroup MMA (wgmma, sm_90a), organised as
//   FlashAttention-3 (Shah et al., arXiv:2407.08608) describes: warp specialisation, "ping-pong"
//   between the two consumers and, inside a consumer, the previous tile's P V behind the next
//   tile's Q K^T.
// - Per key tile and consumer, S = Q K^T is 8 wgmma.m64n128k16 with both operands in shared
//   memory; the online softmax runs on the fp32 accumulator in registers; O += P V is 8 more,
//   with P taken from the score registers rounded to bf16 pairs (the m64n128 accumulator layout
//   of two adjacent 8-column chunks is the register A-operand layout of one k16 step) and V read
//   from shared memory as an MN-major operand (rows of keys, columns contiguous), so neither P
//   nor a transposed V is ever written.
// - Shared memory tiles use the 128-byte swizzle wgmma reads: a 128 x 128 tile is two 64-column
//   halves of 128-byte rows, and 16-byte chunk c of row r sits at chunk c ^ (r % 8) of its row,
//   8 rows (1024 bytes) per swizzle atom. The tensor maps' 128-byte swizzle writes that layout
//   directly: a tile is two boxes, one per 64-column half.
//   Descriptors: Q and K are K-major (stride between 8-row groups 1024 bytes; a k16 step is +32
//   bytes inside the atom); V is MN-major (8-key groups 1024 bytes apart, the second 64-column
//   half 16384 bytes on).
// - Producer and consumers meet at mbarriers: per stage a "full" barrier for the key tile and
//   one for the value tile (the producer thread arrives once, telling it the tile's 32 KiB to
//   expect, and the two boxes' bytes complete it as they land: mbarrier.arrive.expect_tx) and
//   an "empty" one each that the eight consumer warps arrive on once their wgmmas have read
//   the tile. The consumer still fences the async proxy (fence.proxy.async) after its wait, as
//   the cp.async design had to; the TMA writes through the async proxy itself, and without the
//   fence the kernel measured the same (0.998-1.001x on every visible case, 2026-12-04).
//   setmaxnreg gives the producer 56 registers and each consumer thread 224: the block starts
//   at 168 a thread (64512 of 65536), and the consumers' increase (256 x 56) must not exceed
//   what the producer gives back (128 x 112), or setmaxnreg.inc waits forever; an earlier
//   persistent variant at 64 / 224 hung so (h200_reference_variants_attention.json).
// - Ping-pong: two named barriers hand the tensor cores from one consumer to the other. A
//   consumer waits for its turn, issues tile t's Q K^T and tile t - 1's P V (16 wgmmas), hands
//   the turn over and then runs tile t's softmax while the other consumer's wgmmas run; it
//   waits for its Q K^T (wait_group 1), does the softmax, then waits for its P V before it
//   packs the new P (P's registers are read by the P V in flight until then). O is rescaled
//   to the previous tile's maximum in the turn, between the two issues, while the scores run
//   (1-1.7 % faster than after the wait).
//   Consumer 1 starts by handing consumer 0 the first turn and never hands over its last one,
//   so that no barrier is left with arrivals at the end.
// - Softmax: the running maximum is kept in raw score units and the scale folded into the
//   exponent, p = 2^(s * scale * log2(e) - m * scale * log2(e)) (one FFMA and one MUFU.EX2 a
//   score). Row sums are kept per thread (a quarter of the row's columns) and reduced across
//   the quad at the end; row maxima are reduced every tile (2 shuffles).
// - Tails: rows at or past seq_len lie outside the tensor maps' extent, which the TMA writes as
//   zeros without reading memory; keys past the end get a score of -inf (only the last key tile
//   checks), so they weigh exactly 0 and their zero values add nothing; query rows past the end
//   are computed on zeros and not stored.
// - Persistent grid: min(work tiles, 132) blocks, each taking every gridDim.x-th work tile (128
//   query rows of one sample and head, query tiles fastest). The stages and their barrier phases
//   run on across a block's work tiles (g counts the key tiles it has loaded); the query tile has
//   an "empty" barrier the consumers release after a work tile's last scores, so the producer
//   loads the next work tile's query and first keys while the consumers finish the last one's
//   P V and epilogue. All work tiles have the same length, so a static share balances (the
//   causal prefill's unequal tiles did not: its persistent variant ran at 0.918x).
// - Measured on the H200 (bench/results/h200_reference_variants_attention.json): 1.33x the
//   speed of the earlier design (both warpgroups loading and computing in step at one block
//   barrier a tile); three stages instead of two change nothing (0.97-1.00x again on
//   2026-12-05). Loading the tiles by TMA instead of 128 producer threads issuing cp.async made
//   it 1.05-1.06x faster on every visible case (h200_reference_variants_tma.json, 2026-12-04),
//   and then the persistent grid 1.02-1.06x (h200_reference_variants.json, 2026-12-05). Side by
//   side with the libraries (h200_parity.json, 2026-12-05) it is 1.00-1.07x the faster of
//   FlashInfer's FlashAttention-3 kernel and cuDNN's (1.04-1.11x with the reference timed in
//   the parity harness too; the one-block-a-tile grid was 1.04-1.09x). Wider key tiles (176
//   keys, as FlashAttention-3 takes at head size 128) measured 1.01-1.06x on the
//   one-block-a-tile grid and 0.99-1.04x on this one (slower on two FLUX cases): not taken.

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
constexpr float kLog2e = 1.4426950408889634f;
static_assert((1 + 2 * kStages) * kTileBytes + kSwizzleAtomBytes + kBarrierBytes == 164992,
              "the launch directive's shared memory");

__device__ __forceinline__ unsigned shared_address(const void* pointer) {
  return static_cast<unsigned>(__cvta_generic_to_shared(pointer));
}

// One arrival on `bar` that also expects `bytes` of bulk copies to complete on it.
__device__ __forceinline__ void arrive_expecting(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

// The box of `map` at coordinates (c0, c1, c2, c3) into shared memory at `destination`, counted
// on `bar` as its bytes land. Elements outside the tensor's extents are written as zeros.
__device__ __forceinline__ void load_box(unsigned destination, const CUtensorMap& map, int c0,
                                         int c1, int c2, int c3, unsigned bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(destination),
      "l"(reinterpret_cast<unsigned long long>(&map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
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

// Orders this thread's earlier shared-memory accesses (generic proxy) before wgmma's reads
// (async proxy). The TMA writes the tiles through the async proxy itself; the fence stays from
// the cp.async design (it costs nothing measurable, see the design notes).
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

// out, query, key, value: [batch, seq_len, num_heads, 128] bf16, row-major, 256-byte aligned.
// Launch (persistent): grid min(cdiv(seq_len, 128) * num_heads * batch, 132), 384 threads, 164992
// bytes of dynamic shared memory.
extern "C" __global__ void __launch_bounds__(kThreads, 1)
    attention_forward(__nv_bfloat16* __restrict__ out,
                      const __grid_constant__ CUtensorMap query_rows,
                      const __grid_constant__ CUtensorMap key_rows,
                      const __grid_constant__ CUtensorMap value_rows, float scale, int seq_len,
                      int num_heads, int batch) {
  extern __shared__ __align__(16) unsigned char shared_storage[];
  const unsigned base = (shared_address(shared_storage) + kSwizzleAtomBytes - 1) &
                        ~static_cast<unsigned>(kSwizzleAtomBytes - 1);
  const unsigned q_tile = base;
  // Barriers after the tiles: the query's, then per stage the key's and value's "full" (copied)
  // and "empty" (read by both consumers) barriers.
  const unsigned barriers = base + (1 + 2 * kStages) * kTileBytes;
  const unsigned full_q = barriers;
  auto full_k = [&](int s) { return barriers + 8 * (1 + s); };
  auto full_v = [&](int s) { return barriers + 8 * (1 + kStages + s); };
  auto empty_k = [&](int s) { return barriers + 8 * (1 + 2 * kStages + s); };
  auto empty_v = [&](int s) { return barriers + 8 * (1 + 3 * kStages + s); };
  const unsigned empty_q = barriers + 8 * (1 + 4 * kStages);
  auto k_tile = [&](int s) { return base + (1 + 2 * s) * kTileBytes; };
  auto v_tile = [&](int s) { return base + (2 + 2 * s) * kTileBytes; };

  if (threadIdx.x == 0) {
    barrier_init(full_q, 1);
    for (int s = 0; s < kStages; ++s) {
      barrier_init(full_k(s), 1);
      barrier_init(full_v(s), 1);
      barrier_init(empty_k(s), 8);  // one arrival per consumer warp
      barrier_init(empty_v(s), 8);
    }
    barrier_init(empty_q, 8);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  const long long row_stride = static_cast<long long>(num_heads) * kHeadDim;
  const int kv_tiles = (seq_len + kBlockKV - 1) / kBlockKV;
  const int q_tiles = (seq_len + kBlockQ - 1) / kBlockQ;
  const int work_tiles = q_tiles * num_heads * batch;
  const int warpgroup = static_cast<int>(threadIdx.x) / 128;

  if (warpgroup == 0) {
    // Producer: the query tile, then every key and value tile through the stages.
    asm volatile("setmaxnreg.dec.sync.aligned.u32 56;\n");
    if (threadIdx.x != 0) return;
    int round = 0;
    for (int work = blockIdx.x; work < work_tiles; work += gridDim.x, ++round) {
      const int q0 = work % q_tiles * kBlockQ;
      const int head = work / q_tiles % num_heads;
      const int sample = work / q_tiles / num_heads;
      const auto load = [&](unsigned tile, const CUtensorMap& rows, int first_row, unsigned bar) {
        arrive_expecting(bar, kTileBytes);
        load_box(tile, rows, 0, head, first_row, sample, bar);
        load_box(tile + kHalfBytes, rows, 64, head, first_row, sample, bar);
      };
      if (round > 0) barrier_wait(empty_q, (round - 1) & 1);
      load(q_tile, query_rows, q0, full_q);
      for (int tile = 0; tile < kv_tiles; ++tile) {
        const int g = round * kv_tiles + tile;  // the block's key tiles so far
        const int s = g % kStages;
        const unsigned reuse = ((g / kStages) + 1) & 1;  // parity of the consumers' release
        if (g >= kStages) barrier_wait(empty_k(s), reuse);
        load(k_tile(s), key_rows, tile * kBlockKV, full_k(s));
        if (g >= kStages) barrier_wait(empty_v(s), reuse);
        load(v_tile(s), value_rows, tile * kBlockKV, full_v(s));
      }
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 224;\n");
  const int consumer = warpgroup - 1;  // rows 64 consumer .. + 63
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warp = static_cast<int>(threadIdx.x) / 32 % 4;  // rows 16 warp .. + 15 of its 64
  const unsigned q_rows = q_tile + consumer * 64 * 128;
  const int my_turn = 1 + consumer;     // named barrier this consumer waits on to issue
  const int their_turn = 2 - consumer;  // the other's

  float o[64];
  float s[64];
  unsigned p[kBlockKV / 16][4];
  int round = 0;
  for (int work = blockIdx.x; work < work_tiles; work += gridDim.x, ++round) {
    const int q0 = work % q_tiles * kBlockQ;
    const long long head_offset =
        (static_cast<long long>(work / q_tiles / num_heads) * seq_len * num_heads +
         work / q_tiles % num_heads) *
        kHeadDim;
    const int g0 = round * kv_tiles;  // the block's key tiles before this work tile's
    float row_max[2] = {__int_as_float(0xff800000), __int_as_float(0xff800000)};
    float row_sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int e = 0; e < 64; ++e) {
      o[e] = 0.0f;
      s[e] = 0.0f;
    }
    const float scale_log2 = scale * kLog2e;

    barrier_wait(full_q, round & 1);
    if (consumer == 1) named_arrive(1);  // consumer 0 issues first

    // Accumulator layout (m64nN, per warp 16 rows): element 4 i + e of lane l is row
    // 16 warp + l / 4 + 8 (e / 2), column 8 i + 2 (l % 4) + e % 2. "Row half" r is e / 2.
    // Scores of tile `tile` into s (issued, not waited for): k16 step kk reads columns 16 kk ..
    // 16 kk + 15, in half kk / 4 at byte 32 (kk % 4) of each 128-byte row.
    auto issue_scores = [&](int tile) {
      const unsigned k = k_tile((g0 + tile) % kStages);
#pragma unroll
      for (int kk = 0; kk < kHeadDim / 16; ++kk) {
        const unsigned column = (kk / 4) * kHalfBytes + (kk % 4) * 32;
        wgmma_scores(s, descriptor(q_rows + column, 16, kSwizzleAtomBytes),
                     descriptor(k + column, 16, kSwizzleAtomBytes), kk > 0);
      }
    };
    // O += P V of tile `tile` (issued, not waited for): k16 step t takes keys 16 t .. 16 t + 15,
    // the score chunks 2 t and 2 t + 1 and the value rows 16 t .. 16 t + 15 (two 8-key groups of
    // 1024 bytes, 2048 bytes a step).
    auto issue_values = [&](int tile) {
      const unsigned v = v_tile((g0 + tile) % kStages);
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
    // Online softmax of the scores of tile `tile` in s: the new row maxima, the factor what was
    // accumulated so far must be rescaled by (returned in rescale), the exponentials in s.
    auto softmax = [&](int tile, float(&rescale)[2]) {
      const int kv0 = tile * kBlockKV;
      if (kv0 + kBlockKV > seq_len) {
#pragma unroll
        for (int e = 0; e < 64; ++e) {
          if (kv0 + (e / 4) * 8 + (lane % 4) * 2 + e % 2 >= seq_len)
            s[e] = __int_as_float(0xff800000);
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
      barrier_wait(full_k(g0 % kStages), (g0 / kStages) & 1);
      fence_for_wgmma();
      named_sync(my_turn);
      wgmma_fence();
      issue_scores(0);
      wgmma_commit();
      if (!(consumer == 1 && kv_tiles == 1)) named_arrive(their_turn);
      wgmma_wait<0>();
      hold(s);
      release(empty_k(g0 % kStages));
      softmax(0, rescale);
      pack_scores();
    }
    // Tile t: its scores, and behind them the previous tile's O += P V, issued in this consumer's
    // turn; the softmax of tile t runs while the other consumer issues.
    for (int tile = 1; tile < kv_tiles; ++tile) {
      const int g = g0 + tile;
      const int stage = g % kStages;
      const int previous = (g - 1) % kStages;
      barrier_wait(full_k(stage), (g / kStages) & 1);
      barrier_wait(full_v(previous), ((g - 1) / kStages) & 1);
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
    // Every score of this work tile is done: the producer may load the next query tile.
    release(empty_q);
    // The last tile's values.
    {
      const int last = g0 + kv_tiles - 1;
      barrier_wait(full_v(last % kStages), (last / kStages) & 1);
      fence_for_wgmma();
      rescale_o(rescale);
      wgmma_fence();
      issue_values(kv_tiles - 1);
      wgmma_commit();
      wgmma_wait<0>();
      hold(o);
      release(empty_v(last % kStages));
    }

    // Epilogue: full row sums, normalise, round to bf16, store the rows inside the sequence.
    __nv_bfloat16* const out_head = out + head_offset;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float total = row_sum[r];
      total += __shfl_xor_sync(0xffffffffu, total, 1);
      total += __shfl_xor_sync(0xffffffffu, total, 2);
      const float inverse = 1.0f / total;
      const int row = q0 + consumer * 64 + warp * 16 + r * 8 + lane / 4;
      if (row < seq_len) {
        __nv_bfloat16* const destination =
            out_head + static_cast<long long>(row) * row_stride + (lane % 4) * 2;
#pragma unroll
        for (int i = 0; i < 16; ++i) {
          *reinterpret_cast<unsigned*>(destination + i * 8) =
              pack_bf16(o[4 * i + 2 * r] * inverse, o[4 * i + 2 * r + 1] * inverse);
        }
      }
    }
  }
}
