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
// Launch plan: one block of 4 warps per 128 query rows of one (sample, head); blocks that share
// a head are numbered consecutively, so the blocks resident at a time read the same keys and
// values, from L2. Dynamic shared memory: the query tile (128 rows) and two stages of a 64-row
// key tile and a 64-row value tile, rows padded from 256 to 272 bytes: (128 + 4 * 64) * 272 =
// 104448 bytes, so two blocks share an SM.
//
// clang-format off
// @launch attention_forward<<<dim3(cdiv(seq_len, 128), num_heads, batch), 128, 104448>>>(out, query, key, value, scale, seq_len, num_heads)
// clang-format on
//
// Design notes (why, for whoever optimises this next):
// - The op is compute bound: 4 * S^2 * 128 flops per (sample, head) against 8 * S * 128 bytes,
//   about S flops a byte (4608 at FLUX's 1024 x 1024). This is the FlashAttention-2 forward
//   schedule (Dao, arXiv:2307.08691) on mma.sync.m16n8k16 (bf16 in, fp32 accumulate): the
//   scores of a 128 x 64 tile never leave registers; each warp owns 32 query rows, so a key
//   or value fragment read from shared memory feeds two m16 row tiles (16 rows a warp would
//   need ~170 shared bytes a clock per SM at the mma.sync rate, more than the 128 there are).
// - Per warp and key tile: S = Q K^T is 8 k-steps x 2 row tiles x 8 key tiles = 128 mma, with
//   Q re-read from shared memory each tile (a warp's 32 x 128 query slice would be 64 more
//   registers on top of the 128 of the output accumulator and 64 of the scores); then the
//   online softmax in registers; then O += P V, 4 k-steps x 2 x 16 = 128 mma, where P is the
//   score accumulator itself rounded to bf16 pairs: the m16n8k16 accumulator layout of two
//   adjacent n8 tiles is exactly the A-operand layout of one k16 step, so P never goes through
//   shared memory. V is read with ldmatrix.trans (the B operand wants two keys of one column
//   per register; V rows hold one key's columns).
// - Softmax: the running maximum is kept in raw score units and the scale folded into the
//   exponent, p = 2^(s * scale * log2(e) - m * scale * log2(e)) (one FFMA and one MUFU.EX2 a
//   score). The row sums are kept per thread (a quarter of the row's columns) and reduced
//   across the quad once, at the end; the row maxima are reduced every tile (2 shuffles).
// - Pipeline: the key and value tiles of step j + 1 are copied (cp.async, 16 bytes a thread)
//   while step j is computed; one barrier a step. Two blocks per SM (128 threads, up to 255
//   registers each, 102 KiB of shared memory) hide each other's barriers and softmax.
// - Tails: rows at or past seq_len are zero-filled by cp.async without reading memory; keys
//   past the end get a score of -inf (only the last key tile checks), so they weigh exactly
//   0, and their zero values add nothing; query rows past the end are computed on zeros and
//   not stored.
// - Epilogue: the output tile is normalised by 1 / row sum in fp32, rounded to bf16, staged
//   in the warp's own rows of the query tile (no other warp reads them) and written with
//   16-byte stores.
// - Expected speed: like FlashAttention-2 on Hopper, about 330 to 370 TFLOP/s at head size 128
//   (mma.sync peaks far below wgmma's 989 TFLOP/s dense bf16). Libraries built on wgmma
//   (cuDNN's fused attention, FlashAttention-3: asynchronous warpgroup MMA from shared memory,
//   TMA loads, producer/consumer warps, softmax overlapped with the next tile's GEMM) reach
//   550 to 700. That is where the rest of the speed is.

#include <cuda_bf16.h>

namespace {

constexpr int kHeadDim = 128;
constexpr int kBlockQ = 128;  // query rows per block
constexpr int kBlockKV = 64;  // key (and value) rows per tile
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kWarpRows = kBlockQ / kWarps;  // 32: two m16 row tiles per warp
// Shared-memory row pitch: 128 bf16 (256 bytes) plus 16 bytes, so that the 8 row addresses of
// one ldmatrix phase start 4 banks apart and cover all 32 banks.
constexpr int kPitch = kHeadDim + 8;
constexpr int kQElems = kBlockQ * kPitch;
constexpr int kTileElems = kBlockKV * kPitch;
constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte copies per row
constexpr float kLog2e = 1.4426950408889634f;
static_assert((kQElems + 4 * kTileElems) * 2 == 104448, "the launch directive's shared memory");

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

__device__ __forceinline__ void wait_all_copies() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

// Copies rows [first_row, first_row + kRows) of one head (row r at head + r * row_stride,
// kHeadDim contiguous bf16) into `tile`; rows at or past seq_len are zero-filled. Sixteen
// consecutive threads copy one 256-byte row, kThreads / 16 rows a pass. The source address is
// stepped from one pointer per pass (rather than computed per copy) so that the compiler does
// not keep a hoisted address for every copy of the tile in registers across the loop.
template <int kRows>
__device__ __forceinline__ void load_tile(__nv_bfloat16* tile, const __nv_bfloat16* head,
                                          int first_row, int seq_len, long long row_stride) {
  constexpr int kRowsPerPass = kThreads / kChunksPerRow;
  static_assert(kRows % kRowsPerPass == 0, "every thread copies as many chunks");
  const int row = static_cast<int>(threadIdx.x) / kChunksPerRow;
  const int column = (static_cast<int>(threadIdx.x) % kChunksPerRow) * 8;
  const __nv_bfloat16* source = head + (first_row + row) * row_stride + column;
  const long long pass_stride = kRowsPerPass * row_stride;
  unsigned destination = shared_address(tile + row * kPitch + column);
#pragma unroll
  for (int pass = 0; pass < kRows / kRowsPerPass; ++pass) {
    const bool valid = first_row + row + pass * kRowsPerPass < seq_len;
    copy_async_16(destination, valid ? source : head, valid);
    source += pass_stride;
    destination += kRowsPerPass * kPitch * 2;
  }
}

// Four 8 x 8 bf16 matrices; lanes 8i .. 8i+7 address the rows of matrix i. Afterwards lane l
// holds row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1 of matrix i in fragment[i].
__device__ __forceinline__ void load_matrix_x4(unsigned (&fragment)[4], unsigned address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(fragment[0]), "=r"(fragment[1]), "=r"(fragment[2]), "=r"(fragment[3])
               : "r"(address));
}

// The same, transposed: lane l holds rows 2 (l % 4) and 2 (l % 4) + 1 of column l / 4.
__device__ __forceinline__ void load_matrix_x4_transposed(unsigned (&fragment)[4],
                                                          unsigned address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(fragment[0]), "=r"(fragment[1]), "=r"(fragment[2]), "=r"(fragment[3])
               : "r"(address));
}

// acc (16 x 8, fp32) += a (16 x 16, row-major) * b (16 x 8, column-major), bf16 inputs.
__device__ __forceinline__ void mma_bf16_16x8x16(float (&acc)[4], const unsigned (&a)[4],
                                                 unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 2^x (MUFU.EX2, relative error about 2^-22); 2^-inf = 0.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Two floats rounded to bf16 (nearest even) in one register, `low` in the low half: the
// element of the smaller column, as mma fragments order them.
__device__ __forceinline__ unsigned pack_bf16(float low, float high) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(low, high);
  return *reinterpret_cast<const unsigned*>(&pair);
}

}  // namespace

// out, query, key, value: [batch, seq_len, num_heads, 128] bf16, row-major, 256-byte aligned.
// Launch: grid (cdiv(seq_len, 128), num_heads, batch), 128 threads, 104448 bytes of dynamic
// shared memory.
extern "C" __global__ void __launch_bounds__(kThreads, 2)
    attention_forward(__nv_bfloat16* __restrict__ out, const __nv_bfloat16* __restrict__ query,
                      const __nv_bfloat16* __restrict__ key,
                      const __nv_bfloat16* __restrict__ value, float scale, int seq_len,
                      int num_heads) {
  extern __shared__ __align__(16) unsigned char shared_storage[];
  __nv_bfloat16* const q_tile = reinterpret_cast<__nv_bfloat16*>(shared_storage);
  // Stage s: its key tile at kv_tiles + 2 s kTileElems, its value tile right after.
  __nv_bfloat16* const kv_tiles = q_tile + kQElems;

  const int q0 = static_cast<int>(blockIdx.x) * kBlockQ;
  const long long row_stride = static_cast<long long>(num_heads) * kHeadDim;
  const long long head_offset =
      (static_cast<long long>(blockIdx.z) * seq_len * num_heads + blockIdx.y) * kHeadDim;
  const __nv_bfloat16* const q_head = query + head_offset;
  const __nv_bfloat16* const k_head = key + head_offset;
  const __nv_bfloat16* const v_head = value + head_offset;
  const int kv_tiles_count = (seq_len + kBlockKV - 1) / kBlockKV;

  auto load_kv = [&](int tile) {
    __nv_bfloat16* stage = kv_tiles + (tile & 1) * 2 * kTileElems;
    load_tile<kBlockKV>(stage, k_head, tile * kBlockKV, seq_len, row_stride);
    load_tile<kBlockKV>(stage + kTileElems, v_head, tile * kBlockKV, seq_len, row_stride);
  };
  load_tile<kBlockQ>(q_tile, q_head, q0, seq_len, row_stride);
  load_kv(0);
  commit_copies();

  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  // Per-lane ldmatrix row offsets (elements). Query (A operand, 16 x 16 per m16 tile): lanes
  // 0-15 rows 0-15 at column 0, lanes 16-31 rows 0-15 at column 8 -> a0..a3. Keys (B operand
  // of S = Q K^T, stored as rows = keys): lanes 0-7 keys 0-7 at column 0 (b0 of key tile n),
  // 8-15 keys 0-7 at column 8 (b1 of n), 16-23 keys 8-15 at 0 (b0 of n + 1), 24-31 keys 8-15 at
  // 8 (b1 of n + 1). Values (B operand of O = P V, transposed load): lanes 0-7 keys 0-7 at
  // column 0 (b0 of column tile c), 8-15 keys 8-15 at 0 (b1 of c), 16-23 keys 0-7 at 8 (b0 of
  // c + 1), 24-31 keys 8-15 at 8 (b1 of c + 1).
  const int q_offset = (warp * kWarpRows + (lane & 15)) * kPitch + (lane >> 4) * 8;
  const int k_offset = ((lane & 7) + ((lane >> 4) << 3)) * kPitch + ((lane >> 3) & 1) * 8;
  const int v_offset = ((lane & 7) + (((lane >> 3) & 1) << 3)) * kPitch + (lane >> 4) * 8;
  const unsigned q_address = shared_address(q_tile) + 2 * q_offset;

  // Lane l holds, per m16 tile i and 16 x 8 accumulator tile, rows l / 4 (elements 0, 1) and
  // l / 4 + 8 (elements 2, 3) at columns 2 (l % 4), 2 (l % 4) + 1: "row half" r is 0 or 1.
  float o[2][kHeadDim / 8][4];
  float row_max[2][2];  // raw scores (unscaled)
  float row_sum[2][2];  // this lane's share of the row's exponentials
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      row_max[i][r] = __int_as_float(0xff800000);
      row_sum[i][r] = 0.0f;
    }
#pragma unroll
    for (int c = 0; c < kHeadDim / 8; ++c) {
#pragma unroll
      for (int e = 0; e < 4; ++e) o[i][c][e] = 0.0f;
    }
  }
  const float scale_log2 = scale * kLog2e;

  for (int tile = 0; tile < kv_tiles_count; ++tile) {
    wait_all_copies();  // this thread's copies of tile `tile` have landed
    __syncthreads();    // everyone's have, and everyone is done with tile - 1's stage
    if (tile + 1 < kv_tiles_count) {
      load_kv(tile + 1);
      commit_copies();
    }
    const unsigned k_address = shared_address(kv_tiles + (tile & 1) * 2 * kTileElems);
    const unsigned v_address = k_address + 2 * kTileElems;

    // S = Q K^T for the warp's 32 rows and the tile's 64 keys.
    float s[2][kBlockKV / 8][4];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int n = 0; n < kBlockKV / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[i][n][e] = 0.0f;
      }
    }
#pragma unroll
    for (int kk = 0; kk < kHeadDim; kk += 16) {
      unsigned a[2][4];
#pragma unroll
      for (int i = 0; i < 2; ++i) load_matrix_x4(a[i], q_address + 2 * (i * 16 * kPitch + kk));
#pragma unroll
      for (int n = 0; n < kBlockKV / 8; n += 2) {
        unsigned b[4];
        load_matrix_x4(b, k_address + 2 * (k_offset + n * 8 * kPitch + kk));
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          mma_bf16_16x8x16(s[i][n], a[i], b[0], b[1]);
          mma_bf16_16x8x16(s[i][n + 1], a[i], b[2], b[3]);
        }
      }
    }

    // Keys past the end of the sequence (last tile only) weigh nothing.
    const int kv0 = tile * kBlockKV;
    if (kv0 + kBlockKV > seq_len) {
#pragma unroll
      for (int n = 0; n < kBlockKV / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (kv0 + n * 8 + (lane & 3) * 2 + (e & 1) >= seq_len) {
#pragma unroll
            for (int i = 0; i < 2; ++i) s[i][n][e] = __int_as_float(0xff800000);
          }
        }
      }
    }

    // Online softmax: new row maxima (every tile holds at least one real key, so they are
    // finite), rescale what was accumulated (2^-inf = 0 on the first tile), exponentials,
    // rounded to bf16 pairs as they are made: p[i][n][r] holds row half r's two columns of key
    // tile n, the A-operand register of the P V product.
    unsigned p[2][kBlockKV / 8][2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float m = row_max[i][r];
#pragma unroll
        for (int n = 0; n < kBlockKV / 8; ++n)
          m = fmaxf(m, fmaxf(s[i][n][2 * r], s[i][n][2 * r + 1]));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
        const float rescale = exp2_approx((row_max[i][r] - m) * scale_log2);
        row_max[i][r] = m;
        const float m_scaled = m * scale_log2;
        float sum = row_sum[i][r] * rescale;
#pragma unroll
        for (int n = 0; n < kBlockKV / 8; ++n) {
          const float p0 = exp2_approx(fmaf(s[i][n][2 * r], scale_log2, -m_scaled));
          const float p1 = exp2_approx(fmaf(s[i][n][2 * r + 1], scale_log2, -m_scaled));
          sum += p0 + p1;
          p[i][n][r] = pack_bf16(p0, p1);
        }
        row_sum[i][r] = sum;
#pragma unroll
        for (int c = 0; c < kHeadDim / 8; ++c) {
          o[i][c][2 * r] *= rescale;
          o[i][c][2 * r + 1] *= rescale;
        }
      }
    }

    // O += P V: key tiles 2t and 2t + 1 of the score accumulator are the A operand of k-step t.
#pragma unroll
    for (int t = 0; t < kBlockKV / 16; ++t) {
      unsigned a[2][4];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        a[i][0] = p[i][2 * t][0];
        a[i][1] = p[i][2 * t][1];
        a[i][2] = p[i][2 * t + 1][0];
        a[i][3] = p[i][2 * t + 1][1];
      }
#pragma unroll
      for (int c = 0; c < kHeadDim / 8; c += 2) {
        unsigned b[4];
        load_matrix_x4_transposed(b, v_address + 2 * (v_offset + t * 16 * kPitch + c * 8));
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          mma_bf16_16x8x16(o[i][c], a[i], b[0], b[1]);
          mma_bf16_16x8x16(o[i][c + 1], a[i], b[2], b[3]);
        }
      }
    }
  }

  // Epilogue: full row sums (the quad's four shares), normalise, round to bf16, stage in this
  // warp's own rows of the query tile, then 16-byte stores of the rows inside the sequence.
  __nv_bfloat16* const staged = q_tile + warp * kWarpRows * kPitch;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float total = row_sum[i][r];
      total += __shfl_xor_sync(0xffffffffu, total, 1);
      total += __shfl_xor_sync(0xffffffffu, total, 2);
      const float inverse = 1.0f / total;
      const int row = i * 16 + r * 8 + (lane >> 2);
#pragma unroll
      for (int c = 0; c < kHeadDim / 8; ++c) {
        *reinterpret_cast<unsigned*>(staged + row * kPitch + c * 8 + (lane & 3) * 2) =
            pack_bf16(o[i][c][2 * r] * inverse, o[i][c][2 * r + 1] * inverse);
      }
    }
  }
  __syncwarp();
  __nv_bfloat16* const out_head = out + head_offset;
#pragma unroll
  for (int k = 0; k < kWarpRows * kChunksPerRow / 32; ++k) {
    const int chunk = lane + k * 32;
    const int row = chunk / kChunksPerRow;
    const int column = (chunk % kChunksPerRow) * 8;
    const int token = q0 + warp * kWarpRows + row;
    if (token < seq_len) {
      *reinterpret_cast<uint4*>(out_head + static_cast<long long>(token) * row_stride + column) =
          *reinterpret_cast<const uint4*>(staged + row * kPitch + column);
    }
  }
}
