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
// Launch plan: one block of two warpgroups (256 threads) per 128 query rows of one (sample,
// head), each warpgroup owning 64 rows; blocks that share a head are numbered consecutively,
// so the blocks resident at a time read the same keys and values from L2. Dynamic shared
// memory: the query tile and two stages of a 128-row key tile and a 128-row value tile, 32 KiB
// each, plus 1 KiB to align the tiles to the 1024-byte swizzle pattern: 164864 bytes, one block
// an SM.
//
// clang-format off
// @launch attention_forward<<<dim3(cdiv(seq_len, 128), num_heads, batch), 256, 164864>>>(out, query, key, value, scale, seq_len, num_heads)
// clang-format on
//
// Design notes (why, for whoever optimises this next):
// - The op is compute bound: 4 * S^2 * 128 flops per (sample, head) against 8 * S * 128 bytes,
//   about S flops a byte (4608 at FLUX's 1024 x 1024). This is the FlashAttention schedule
//   (Dao, arXiv:2205.14135, 2307.08691) on Hopper's warpgroup MMA (wgmma, sm_90a): per key tile
//   and warpgroup, S = Q K^T is 8 wgmma.m64n128k16 with both operands in shared memory; the
//   online softmax runs on the fp32 accumulator in registers; O += P V is 8 more, with P taken
//   from the score registers rounded to bf16 pairs (the m64n128 accumulator layout of two
//   adjacent 8-column chunks is the register A-operand layout of one k16 step) and V read
//   from shared memory as an MN-major operand (rows of keys, columns contiguous), so neither
//   P nor a transposed V is ever written.
// - Shared memory tiles use the 128-byte swizzle wgmma reads: a 128 x 128 tile is two 64-column
//   halves of 128-byte rows, and 16-byte chunk c of row r sits at chunk c ^ (r % 8) of its row,
//   8 rows (1024 bytes) per swizzle atom. The cp.async copies write that layout directly (each
//   thread copies a fixed chunk column, so its swizzle is one XOR computed once). Descriptors:
//   Q and K are K-major (stride between 8-row groups 1024 bytes; a k16 step is +32 bytes
//   inside the atom); V is MN-major (8-key groups 1024 bytes apart, the second 64-column half
//   16384 bytes on).
// - Softmax: the running maximum is kept in raw score units and the scale folded into the
//   exponent, p = 2^(s * scale * log2(e) - m * scale * log2(e)) (one FFMA and one MUFU.EX2 a
//   score). Row sums are kept per thread (a quarter of the row's columns) and reduced across
//   the quad at the end; row maxima are reduced every tile (2 shuffles).
// - Pipeline: the key and value tiles of step j + 1 are copied (cp.async, 16 bytes a thread)
//   while step j is computed; cp.async writes through the generic proxy and wgmma reads through
//   the async proxy, so every thread fences (fence.proxy.async) between its copies landing and
//   the block barrier that precedes the wgmmas reading them. One barrier a step.
// - Tails: rows at or past seq_len are zero-filled by cp.async without reading memory; keys
//   past the end get a score of -inf (only the last key tile checks), so they weigh exactly 0
//   and their zero values add nothing; query rows past the end are computed on zeros and not
//   stored.
// - Epilogue: the output is normalised by 1 / row sum in fp32, rounded to bf16, staged in the
//   free key-value stage (rows padded to 272 bytes) and written with 16-byte stores.
// - Expected speed, per SM and key tile (two warpgroups): 16 wgmma.m64n128k16 each, 8.4 MFLOP,
//   2048 clocks at the dense bf16 peak (989 TFLOP/s = 132 SMs x 1.83 GHz x 4096 flops a clock);
//   16384 exponentials at 16 a clock (MUFU), 1024 clocks. The block barrier keeps the two
//   warpgroups in step, so the softmax does not overlap the other warpgroup's GEMMs and a tile
//   takes about 3300 clocks: ~60 % of peak at best, 450 to 550 TFLOP/s after load and barrier
//   overheads (FLUX.1 at 1024 x 1024, 2.6e11 FLOPs: ~0.5 ms). FlashAttention-2 (mma.sync)
//   reaches ~350 on Hopper; cuDNN and FlashAttention-3 600 to 660.
// - What is left, and where FlashAttention-3 (arXiv:2407.08608) and cuDNN are faster: TMA loads
//   issued by a producer warp (here every thread copies and waits), per-stage mbarriers instead
//   of a block barrier (so the two warpgroups drift apart and one's softmax overlaps the other's
//   GEMMs, which FA3 enforces with "ping-pong" named barriers), and overlapping the softmax of
//   tile j with the Q K^T of tile j + 1 inside a warpgroup.

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

// Copies rows [first_row, first_row + 128) of one head (row r at head + r * row_stride, 128
// contiguous bf16) into the swizzled tile at shared address `tile` (1024-byte aligned): 16-byte
// chunk c of row r goes to half c / 8, row r, chunk (c % 8) ^ (r % 8). Rows at or past seq_len
// are zero-filled. Thread t copies chunk t % 16 of rows t / 16 + 16 k; sixteen consecutive
// threads copy one 256-byte row.
__device__ __forceinline__ void load_tile(unsigned tile, const __nv_bfloat16* head, int first_row,
                                          int seq_len, long long row_stride) {
  const int chunk = static_cast<int>(threadIdx.x) % 16;
  const int row = static_cast<int>(threadIdx.x) / 16;  // rows row + 16 k, all with row % 8
  const unsigned swizzled = (chunk / 8) * kHalfBytes + row * 128 + (((chunk % 8) ^ (row % 8)) << 4);
  const __nv_bfloat16* source = head + (first_row + row) * row_stride + chunk * 8;
#pragma unroll
  for (int k = 0; k < kBlockKV / 16; ++k) {
    const bool valid = first_row + row + 16 * k < seq_len;
    copy_async_16(tile + swizzled + k * 16 * 128, valid ? source : head, valid);
    source += 16 * row_stride;
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

// out, query, key, value: [batch, seq_len, num_heads, 128] bf16, row-major, 256-byte aligned.
// Launch: grid (cdiv(seq_len, 128), num_heads, batch), 256 threads, 164864 bytes of dynamic
// shared memory.
extern "C" __global__ void __launch_bounds__(kThreads, 1)
    attention_forward(__nv_bfloat16* __restrict__ out, const __nv_bfloat16* __restrict__ query,
                      const __nv_bfloat16* __restrict__ key,
                      const __nv_bfloat16* __restrict__ value, float scale, int seq_len,
                      int num_heads) {
  extern __shared__ __align__(16) unsigned char shared_storage[];
  // Tiles start at the first 1024-byte boundary: the query tile, then stage s's key tile at
  // (1 + 2 s) tiles and its value tile at (2 + 2 s).
  const unsigned base = (shared_address(shared_storage) + kSwizzleAtomBytes - 1) &
                        ~static_cast<unsigned>(kSwizzleAtomBytes - 1);
  unsigned char* const base_pointer = shared_storage + (base - shared_address(shared_storage));
  const unsigned q_tile = base;

  const int q0 = static_cast<int>(blockIdx.x) * kBlockQ;
  const long long row_stride = static_cast<long long>(num_heads) * kHeadDim;
  const long long head_offset =
      (static_cast<long long>(blockIdx.z) * seq_len * num_heads + blockIdx.y) * kHeadDim;
  const __nv_bfloat16* const k_head = key + head_offset;
  const __nv_bfloat16* const v_head = value + head_offset;
  const int kv_tiles = (seq_len + kBlockKV - 1) / kBlockKV;

  auto load_kv = [&](int tile) {
    const unsigned stage = base + (1 + 2 * (tile & 1)) * kTileBytes;
    load_tile(stage, k_head, tile * kBlockKV, seq_len, row_stride);
    load_tile(stage + kTileBytes, v_head, tile * kBlockKV, seq_len, row_stride);
  };
  load_tile(q_tile, query + head_offset, q0, seq_len, row_stride);
  load_kv(0);
  commit_copies();

  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warp = static_cast<int>(threadIdx.x) / 32;  // rows 16 warp .. 16 warp + 15
  const int warpgroup = warp / 4;                       // rows 64 warpgroup .. + 63
  // This warpgroup's 64 query rows: 8 swizzle atoms into each half of the query tile.
  const unsigned q_rows = q_tile + warpgroup * 64 * 128;

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
      wgmma_scores(s, descriptor(q_rows + column, 16, kSwizzleAtomBytes),
                   descriptor(k_tile + column, 16, kSwizzleAtomBytes), kk > 0);
    }
    wgmma_commit_and_wait();

    // Keys past the end of the sequence (last tile only) weigh nothing.
    const int kv0 = tile * kBlockKV;
    if (kv0 + kBlockKV > seq_len) {
#pragma unroll
      for (int e = 0; e < 64; ++e) {
        if (kv0 + (e / 4) * 8 + (lane % 4) * 2 + e % 2 >= seq_len)
          s[e] = __int_as_float(0xff800000);
      }
    }

    // Online softmax: new row maxima (every tile holds at least one real key, so they are
    // finite), rescale what was accumulated (2^-inf = 0 on the first tile), exponentials.
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
  __nv_bfloat16* const out_head = out + head_offset;
#pragma unroll
  for (int k = 0; k < kBlockQ * 16 / kThreads; ++k) {
    const int chunk = static_cast<int>(threadIdx.x) + k * kThreads;
    const int row = chunk / 16;
    const int column = (chunk % 16) * 8;
    if (q0 + row < seq_len) {
      *reinterpret_cast<uint4*>(out_head + static_cast<long long>(q0 + row) * row_stride + column) =
          *reinterpret_cast<const uint4*>(staged + row * kStagePitch + column);
    }
  }
}
