// Starting point for llm/fp8_scaled_linear: vLLM's w8a8 fp8 linear layer (cutlass_scaled_mm),
// out = (a_scales b_scales^T) * (a @ b^T), fp8 e4m3 operands, bf16 out.
//
// Device code only, compiled by NVRTC for sm_90a and launched as the directives below say (see
// kernels/llm/rms_norm.cu for the conventions). The task's timed reference is cuBLASLt's fp8
// GEMM with outer-vector scales, run by the server; this file is the tensor-core GEMM an agent
// starts from. It computes
//
//   out[t, n] = bf16( a_scales[t] * b_scales[n] * sum_k a[t, k] * b[n, k] )
//
// with exact e4m3 products summed in fp32, the two fp32 scales applied to the sum and one
// rounding to bf16. a is [num_tokens, in_features], b is [out_features, in_features] (one row
// per output feature), a_scales is [num_tokens, 1], b_scales is [out_features, 1], out is
// [num_tokens, out_features], all row-major. in_features and out_features are multiples of 16;
// num_tokens is any count >= 1.
//
// Launch plan: one templated kernel, fp8_scaled_linear_kernel<BM, BN, WARPS_M, WARPS_N, STAGES,
// MIN_BLOCKS>, each block computing a BM x BN tile of out with WARPS_M x WARPS_N warps, K stepped
// 128 at a time through a STAGES-deep cp.async pipeline. The dynamic shared memory is
// STAGES * (BM + BN) * 144 bytes (a 128-wide K slice, 128 bytes, of BM rows of a and BN rows of
// b, each row padded to 144 bytes). The grid is one block per output tile.
//
//   num_tokens       BM x BN    warps (tile each)   stages  smem       blocks at N = 4096
//   1 .. 16          16 x 32    1 x 2  (16 x 16)    8       54 KiB     128
//   17 .. 64         64 x 32    2 x 2  (32 x 16)    6       81 KiB     128
//   65 .. 512        64 x 64    2 x 2  (32 x 32)    4       72 KiB     128 .. 512
//   513 ..           128 x 128  2 x 4  (64 x 32)    3       108 KiB    256 at 1024 tokens
//
// clang-format off
// @launch if (num_tokens <= 16) fp8_scaled_linear_kernel<16, 32, 1, 2, 8, 2><<<cdiv(num_tokens, 16) * cdiv(out_features, 32), 64, 8 * (16 + 32) * 144>>>(out, a, b, a_scales, b_scales, num_tokens, in_features, out_features)
// @launch if (num_tokens > 16 && num_tokens <= 64) fp8_scaled_linear_kernel<64, 32, 2, 2, 6, 2><<<cdiv(num_tokens, 64) * cdiv(out_features, 32), 128, 6 * (64 + 32) * 144>>>(out, a, b, a_scales, b_scales, num_tokens, in_features, out_features)
// @launch if (num_tokens > 64 && num_tokens <= 512) fp8_scaled_linear_kernel<64, 64, 2, 2, 4, 2><<<cdiv(num_tokens, 64) * cdiv(out_features, 64), 128, 4 * (64 + 64) * 144>>>(out, a, b, a_scales, b_scales, num_tokens, in_features, out_features)
// @launch if (num_tokens > 512) fp8_scaled_linear_kernel<128, 128, 2, 4, 3, 1><<<cdiv(num_tokens, 128) * cdiv(out_features, 128), 256, 3 * (128 + 128) * 144>>>(out, a, b, a_scales, b_scales, num_tokens, in_features, out_features)
// clang-format on
//
// Design notes (why, for whoever optimises this next):
// - The byte layout is kernels/llm/linear.cu's: an e4m3 mma.sync (m16n8k32) takes the same
//   fragments, byte for byte, as a bf16 m16n8k16, so a 16-byte row piece of ldmatrix (8
//   16-bit columns) is 16 fp8 values of K, and a 128-byte shared-memory row holds 128 of K.
//   Each lane's 32-bit register holds 4 consecutive k of one row: a0/a1 k 0..15 of rows r and
//   r + 8, a2/a3 k 16..31; b0 k 0..15 and b1 k 16..31 of output feature n.
// - Accumulation: each 128-wide K slice is summed by 4 mma.sync into a zeroed partial tile,
//   which is then added to the running sum with ordinary fp32 adds. Hopper's fp8 tensor-core
//   paths add into their accumulator with fewer bits than fp32 (the DeepSeek-V3 report measured
//   about 14 retained bits); promoting every 128 of K, as cuBLASLt and CUTLASS do without "fast
//   accumulation", confines that truncation to one slice's partial sum, so the error grows with
//   the square root of the slices rather than with all of K (the task's atol allows for it;
//   task.toml says how much). It costs a second set of accumulators, hence one block per SM
//   (MIN_BLOCKS 1) for the 128 x 128 tile.
// - Decode (1 to 256 tokens) is memory bound on b: N * K bytes (117 MB for 8B's gate_up) read
//   once. Narrow N tiles and deep pipelines keep bytes in flight on every SM; rows of the M
//   tile past num_tokens are zero-filled by cp.async without touching global memory.
// - The scales are read once per output element pair in the epilogue (a_scales per row,
//   b_scales per column); (sum * a_scale) * b_scale rounds twice in fp32, far below a bf16 ulp.
// - Tails: every 16-byte copy is predicated on its row being in range and its 16 values of K
//   being in range (in_features % 16 == 0, so a vector is wholly in or out); zero-filled bytes
//   are e4m3 zeros and add nothing. An n8 tile of out is wholly in or out (out_features % 16).
// - Not done here, and where cuBLASLt's speed is: Hopper's wgmma (fp8 at twice mma.sync's rate
//   at best), TMA loads with a producer warp, split K for decode shapes with few N tiles, and an
//   epilogue staged through shared memory for 16-byte stores.

#include <cuda_bf16.h>
#include <cuda_fp8.h>

namespace {

constexpr int kWarpSize = 32;
// K values (bytes) per pipeline stage, and the shared-memory row pitch: 128 bytes padded by 16
// so that consecutive rows start 4 banks apart (conflict-free ldmatrix phases).
constexpr int kBlockK = 128;
constexpr int kSmemPitch = kBlockK + 16;
// fp8 values per 16-byte cp.async, and copies per K slice of one row.
constexpr int kVectorElems = 16;
constexpr int kVectorsPerRow = kBlockK / kVectorElems;
// K per mma.sync.m16n8k32.
constexpr int kMmaK = 32;
// M tiles per block group (consecutive blocks share b's columns in L2, as in linear.cu).
constexpr int kGroupTilesM = 8;

__device__ __forceinline__ unsigned shared_address(const void* pointer) {
  return static_cast<unsigned>(__cvta_generic_to_shared(pointer));
}

// 16-byte global -> shared copy that bypasses L1. With `valid` false, no global memory is read
// (src-size 0) and the 16 shared bytes are zero-filled; `source` must still be a mapped
// address, so callers pass the tensor's base then.
__device__ __forceinline__ void copy_async_16(unsigned destination, const void* source,
                                              bool valid) {
  const int source_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(destination), "l"(source),
               "r"(source_bytes));
}

__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;\n" ::); }

template <int kPending>
__device__ __forceinline__ void wait_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Four 8-row x 16-byte matrices from shared memory. Lanes 8i .. 8i+7 give the row addresses of
// matrix i; afterwards lane l holds, in fragment[i], bytes 4 (l % 4) .. 4 (l % 4) + 3 of row
// l / 4 of matrix i.
__device__ __forceinline__ void load_matrix_x4(unsigned (&fragment)[4], unsigned address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(fragment[0]), "=r"(fragment[1]), "=r"(fragment[2]), "=r"(fragment[3])
               : "r"(address));
}

// acc (16 x 8, fp32) += a (16 x 32, row-major) * b (32 x 8, column-major), e4m3 inputs.
__device__ __forceinline__ void mma_e4m3_16x8x32(float (&acc)[4], const unsigned (&a)[4],
                                                 unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Starts the copy of rows [first_row, first_row + kRows) x K [k0, k0 + kBlockK) of a row-major
// [num_rows, row_length] byte matrix into `tile` (pitch kSmemPitch). Rows at or past num_rows
// and K at or past row_length (a multiple of 16) are zero-filled.
template <int kRows, int kThreads>
__device__ __forceinline__ void load_rows_async(unsigned char* tile,
                                                const unsigned char* __restrict__ matrix,
                                                int first_row, int num_rows, int k0,
                                                int row_length) {
  static_assert(kRows * kVectorsPerRow % kThreads == 0, "every thread copies as many vectors");
#pragma unroll
  for (int i = 0; i < kRows * kVectorsPerRow / kThreads; ++i) {
    // Consecutive threads copy consecutive 16-byte vectors of a row: 8 threads per 128 bytes.
    const int vector = static_cast<int>(threadIdx.x) + i * kThreads;
    const int row = vector / kVectorsPerRow;
    const int column = (vector % kVectorsPerRow) * kVectorElems;
    const bool valid = first_row + row < num_rows && k0 + column < row_length;
    const unsigned char* source =
        valid ? matrix + static_cast<size_t>(first_row + row) * row_length + (k0 + column) : matrix;
    copy_async_16(shared_address(tile + row * kSmemPitch + column), source, valid);
  }
}

}  // namespace

// out: [num_tokens, out_features] bf16; a: [num_tokens, in_features] e4m3; b: [out_features,
// in_features] e4m3; a_scales: [num_tokens] f32; b_scales: [out_features] f32; row-major,
// 16-byte aligned rows (in_features % 16 == 0, out_features % 16 == 0). Launch: one block of
// kWarpsM * kWarpsN warps per BM x BN output tile, gridDim.x = cdiv(num_tokens, BM) *
// cdiv(out_features, BN), dynamic shared memory kStages * (BM + BN) * kSmemPitch bytes.
template <int kBlockM, int kBlockN, int kWarpsM, int kWarpsN, int kStages, int kMinBlocks>
__global__ void __launch_bounds__((kWarpsM * kWarpsN * kWarpSize), kMinBlocks)
    fp8_scaled_linear_kernel(__nv_bfloat16* __restrict__ out, const __nv_fp8_e4m3* __restrict__ a,
                             const __nv_fp8_e4m3* __restrict__ b,
                             const float* __restrict__ a_scales,
                             const float* __restrict__ b_scales, int num_tokens, int in_features,
                             int out_features) {
  constexpr int kThreads = kWarpsM * kWarpsN * kWarpSize;
  constexpr int kWarpM = kBlockM / kWarpsM;  // rows of out per warp
  constexpr int kWarpN = kBlockN / kWarpsN;  // columns of out per warp
  constexpr int kFragmentsM = kWarpM / 16;   // m16 tiles per warp
  constexpr int kFragmentsN = kWarpN / 8;    // n8 tiles per warp
  constexpr int kStageBytes = (kBlockM + kBlockN) * kSmemPitch;
  static_assert(kWarpM % 16 == 0, "a warp's rows are whole m16 tiles");
  static_assert(kWarpN % 16 == 0, "a warp's columns are pairs of n8 tiles (one ldmatrix.x4)");
  static_assert(kStages >= 2, "the pipeline overlaps at least one copy with the math");

  // Each stage holds kBlockM rows of a, then kBlockN rows of b, of one 128-wide K slice.
  extern __shared__ __align__(16) unsigned char shared_storage[];
  const auto* a_bytes = reinterpret_cast<const unsigned char*>(a);
  const auto* b_bytes = reinterpret_cast<const unsigned char*>(b);

  // Block -> output tile, in groups of kGroupTilesM row tiles.
  const int tiles_m = (num_tokens + kBlockM - 1) / kBlockM;
  const int tiles_n = (out_features + kBlockN - 1) / kBlockN;
  const int blocks_per_group = kGroupTilesM * tiles_n;
  const int first_tile_m = static_cast<int>(blockIdx.x) / blocks_per_group * kGroupTilesM;
  const int group_tiles_m = min(tiles_m - first_tile_m, kGroupTilesM);
  const int index_in_group = static_cast<int>(blockIdx.x) % blocks_per_group;
  const int m0 = (first_tile_m + index_in_group % group_tiles_m) * kBlockM;
  const int n0 = (index_in_group / group_tiles_m) * kBlockN;

  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int warp_m0 = (warp / kWarpsN) * kWarpM;  // within the block tile
  const int warp_n0 = (warp % kWarpsN) * kWarpN;

  const int k_tiles = (in_features + kBlockK - 1) / kBlockK;
  auto load_stage = [&](int k_tile) {
    unsigned char* stage = shared_storage + (k_tile % kStages) * kStageBytes;
    const int k0 = k_tile * kBlockK;
    load_rows_async<kBlockM, kThreads>(stage, a_bytes, m0, num_tokens, k0, in_features);
    load_rows_async<kBlockN, kThreads>(stage + kBlockM * kSmemPitch, b_bytes, n0, out_features,
                                       k0, in_features);
  };

  // Per-lane ldmatrix row addresses (bytes, within a stage). A (16 rows x 32 k per m16 tile):
  // lanes 0-15 give rows 0-15 at k 0, lanes 16-31 rows 0-15 at k 16, so the four matrices are
  // a0 (rows 0-7, k 0-15), a1 (rows 8-15, k 0-15), a2 (rows 0-7, k 16-31), a3 (rows 8-15,
  // k 16-31) of mma.m16n8k32. B (b's rows are n, its bytes k: the "col" operand as stored):
  // lanes 0-7 n 0-7 at k 0 (b0 of n8 tile j), 8-15 n 0-7 at k 16 (b1 of tile j), 16-23 n 8-15 at
  // k 0 (b0 of tile j + 1), 24-31 n 8-15 at k 16 (b1 of tile j + 1).
  const int a_offset = (warp_m0 + (lane & 15)) * kSmemPitch + (lane >> 4) * 16;
  const int b_offset =
      (kBlockM + warp_n0 + (lane & 7) + ((lane >> 4) << 3)) * kSmemPitch + ((lane >> 3) & 1) * 16;

  float acc[kFragmentsM][kFragmentsN][4];
#pragma unroll
  for (int i = 0; i < kFragmentsM; ++i) {
#pragma unroll
    for (int j = 0; j < kFragmentsN; ++j) {
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.0f;
    }
  }

  // Prologue: kStages - 1 slices in flight. Every iteration commits one group, empty or not,
  // so that "group t has landed" is always "at most kStages - 2 groups pending".
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) load_stage(s);
    commit_copies();
  }

  for (int k_tile = 0; k_tile < k_tiles; ++k_tile) {
    wait_copies<kStages - 2>();  // this thread's copies of slice k_tile have landed
    __syncthreads();             // everyone's have, and everyone is done with slice k_tile - 1
    if (k_tile + kStages - 1 < k_tiles) load_stage(k_tile + kStages - 1);
    commit_copies();

    const unsigned stage = shared_address(shared_storage + (k_tile % kStages) * kStageBytes);
    // This slice's sum, promoted to the fp32 running sum below (see the design notes).
    float partial[kFragmentsM][kFragmentsN][4];
#pragma unroll
    for (int i = 0; i < kFragmentsM; ++i) {
#pragma unroll
      for (int j = 0; j < kFragmentsN; ++j) {
#pragma unroll
        for (int r = 0; r < 4; ++r) partial[i][j][r] = 0.0f;
      }
    }
    // Not unrolled: with both accumulator sets live, unrolling the four steps (ptxas then loads
    // every step's fragments ahead) spills registers in the 128 x 128 tile.
#pragma unroll 1
    for (int kk = 0; kk < kBlockK; kk += kMmaK) {
      unsigned a_fragments[kFragmentsM][4];
      unsigned b_fragments[kFragmentsN / 2][4];
#pragma unroll
      for (int i = 0; i < kFragmentsM; ++i) {
        load_matrix_x4(a_fragments[i], stage + a_offset + i * 16 * kSmemPitch + kk);
      }
#pragma unroll
      for (int j = 0; j < kFragmentsN / 2; ++j) {
        load_matrix_x4(b_fragments[j], stage + b_offset + j * 16 * kSmemPitch + kk);
      }
#pragma unroll
      for (int i = 0; i < kFragmentsM; ++i) {
#pragma unroll
        for (int j = 0; j < kFragmentsN; ++j) {
          mma_e4m3_16x8x32(partial[i][j], a_fragments[i], b_fragments[j / 2][(j % 2) * 2],
                           b_fragments[j / 2][(j % 2) * 2 + 1]);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kFragmentsM; ++i) {
#pragma unroll
      for (int j = 0; j < kFragmentsN; ++j) {
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[i][j][r] += partial[i][j][r];
      }
    }
  }
  // Drain the (empty) trailing groups before the block exits.
  wait_copies<0>();

  // Epilogue. Lane l holds, per 16 x 8 tile, rows l / 4 and l / 4 + 8 at columns 2 (l % 4) and
  // 2 (l % 4) + 1: scale by the row's token scale and each column's channel scale, round the
  // pair to bf16 and store it as one 4-byte word.
  const int lane_row = lane >> 2;
  const int lane_column = (lane & 3) * 2;
#pragma unroll
  for (int i = 0; i < kFragmentsM; ++i) {
    const int row = m0 + warp_m0 + i * 16 + lane_row;
    const float row_scale = row < num_tokens ? a_scales[row] : 0.0f;
    const float row8_scale = row + 8 < num_tokens ? a_scales[row + 8] : 0.0f;
#pragma unroll
    for (int j = 0; j < kFragmentsN; ++j) {
      const int column = n0 + warp_n0 + j * 8 + lane_column;
      if (column >= out_features) continue;  // the whole n8 tile is past the end
      const float scale0 = b_scales[column];
      const float scale1 = b_scales[column + 1];
      if (row < num_tokens) {
        *reinterpret_cast<__nv_bfloat162*>(out + static_cast<size_t>(row) * out_features + column) =
            __floats2bfloat162_rn(acc[i][j][0] * row_scale * scale0,
                                  acc[i][j][1] * row_scale * scale1);
      }
      if (row + 8 < num_tokens) {
        *reinterpret_cast<__nv_bfloat162*>(out + static_cast<size_t>(row + 8) * out_features +
                                           column) =
            __floats2bfloat162_rn(acc[i][j][2] * row8_scale * scale0,
                                  acc[i][j][3] * row8_scale * scale1);
      }
    }
  }
}
