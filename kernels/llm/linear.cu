// Starting point for llm/linear: vLLM's unquantized linear layer, out = input @ weight^T, bf16.
//
// Device code only, compiled by NVRTC for sm_90a and launched as the directives below say (see
// kernels/llm/rms_norm.cu for the conventions). The task's timed reference is cuBLASLt, run by
// the server; this file is the tensor-core GEMM an agent starts from. It computes
//
//   out[t, n] = sum_k input[t, k] * weight[n, k]
//
// with bf16 products accumulated in fp32 and one rounding to bf16 at the end, as
// torch.nn.functional.linear(input, weight) does. input is [num_tokens, in_features], weight
// is [out_features, in_features] (nn.Linear's layout), out is [num_tokens, out_features], all
// row-major. in_features and out_features are multiples of 8; num_tokens is any count >= 1.
//
// Launch plan: one templated kernel, linear_kernel<BM, BN, WARPS_M, WARPS_N, STAGES>, each
// block computing a BM x BN tile of out with WARPS_M x WARPS_N warps, K stepped 64 at a time
// through a STAGES-deep cp.async pipeline. The dynamic shared memory is
// STAGES * (BM + BN) * 144 bytes (a 64-wide K slice of BM input rows and BN weight rows, each
// row padded from 128 to 144 bytes). The grid is one block per output tile.
//
//   num_tokens       BM x BN    warps (tile each)   stages  smem       blocks at N = 4096
//   1 .. 16          16 x 32    1 x 2  (16 x 16)    8       54 KiB     128
//   17 .. 64         64 x 32    2 x 2  (32 x 16)    6       81 KiB     128
//   65 .. 512        64 x 64    2 x 2  (32 x 32)    4       72 KiB     128 .. 512
//   513 ..           128 x 128  2 x 4  (64 x 32)    3       108 KiB    256 at 1024 tokens
//
// clang-format off
// @launch if (num_tokens <= 16) linear_kernel<16, 32, 1, 2, 8><<<cdiv(num_tokens, 16) * cdiv(out_features, 32), 64, 8 * (16 + 32) * 144>>>(out, input, weight, num_tokens, in_features, out_features)
// @launch if (num_tokens > 16 && num_tokens <= 64) linear_kernel<64, 32, 2, 2, 6><<<cdiv(num_tokens, 64) * cdiv(out_features, 32), 128, 6 * (64 + 32) * 144>>>(out, input, weight, num_tokens, in_features, out_features)
// @launch if (num_tokens > 64 && num_tokens <= 512) linear_kernel<64, 64, 2, 2, 4><<<cdiv(num_tokens, 64) * cdiv(out_features, 64), 128, 4 * (64 + 64) * 144>>>(out, input, weight, num_tokens, in_features, out_features)
// @launch if (num_tokens > 512) linear_kernel<128, 128, 2, 4, 3><<<cdiv(num_tokens, 128) * cdiv(out_features, 128), 256, 3 * (128 + 128) * 144>>>(out, input, weight, num_tokens, in_features, out_features)
// clang-format on
//
// Design notes (why, for whoever optimises this next):
// - Prefill (hundreds of tokens and up) is compute bound: 2 * M * N * K flops against
//   2 * (M * K + N * K + M * N) bytes. The big tile (128 x 128, a 64 x 32 tile per warp: 16
//   mma.sync per 16-wide K step from 4 A and 2 B ldmatrix.x4) does about 21 flops per byte of
//   shared memory read, and input is read from L2 once per 128-column tile, the weight once
//   per 128-row tile. Three stages of 36 KiB let two blocks share an SM (two 8-warp blocks hide
//   each other's barriers), which __launch_bounds__(threads, 2) holds to 128 registers.
// - Decode (1 to 256 tokens) is memory bound on the weight: 2 * N * K bytes (235 MB for
//   gate_up) read once, against almost no math. What matters there is enough blocks to cover
//   132 SMs and enough bytes in flight per SM, hence narrow N tiles (32 columns: 128 blocks at
//   N = 4096) and deep pipelines (8 stages of 4 KiB of weight per 64-thread block). Rows of
//   the M tile past num_tokens are zero-filled by cp.async without touching global memory, so
//   a 1-token batch costs the same weight traffic as a 16-token one. What this plan does not
//   do, and cuBLAS does at small M: split K across blocks (with a reduction) so that N = 4096
//   fills more than 128 blocks, and keep more bytes in flight per SM (TMA, larger stages).
// - Blocks are numbered in groups of 8 M tiles: consecutive blocks walk down 8 row tiles of
//   the same weight columns before moving right, so a wave of resident blocks shares both its
//   input rows and its weight rows in L2 instead of streaming the whole weight per row tile.
// - Shared memory rows are padded to 144 bytes (72 bf16): the 8 row addresses of one ldmatrix
//   phase then start 4 banks apart and cover all 32 banks, and 8 consecutive threads' 16-byte
//   cp.async writes fill one contiguous 128-byte row, so neither side has bank conflicts. An
//   XOR swizzle would do the same without the 12.5% of wasted shared memory.
// - Tails: every 16-byte copy is predicated on its row being in range (rows past num_tokens
//   or out_features) and its 8 columns being in range (K tails: in_features % 64 != 0; a
//   multiple of 8 is either wholly in or wholly out); out-of-range copies read nothing and
//   write zeros, which add nothing to the dot products. The epilogue writes only rows below
//   num_tokens; an n8 accumulator tile is wholly in or out because out_features % 8 == 0.
// - Not done here, and where the rest of cuBLAS's speed is: Hopper's wgmma (asynchronous
//   warpgroup MMA reading shared memory directly; mma.sync cannot reach Hopper's peak),
//   TMA loads with a producer warp, and an epilogue staged through shared memory so that
//   stores are 16 bytes wide instead of 4.

#include <cuda_bf16.h>

namespace {

constexpr int kWarpSize = 32;
// K elements per pipeline stage, and the shared-memory row pitch: 64 bf16 (128 bytes) padded
// by 16 bytes so that consecutive rows start 4 banks apart.
constexpr int kBlockK = 64;
constexpr int kSmemPitch = kBlockK + 8;
// bf16 elements per 16-byte cp.async, and copies per K slice of one row.
constexpr int kVectorElems = 8;
constexpr int kVectorsPerRow = kBlockK / kVectorElems;
// M tiles per block group (see the design notes on block order).
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

// Waits until at most kPending of this thread's committed copy groups are still in flight.
template <int kPending>
__device__ __forceinline__ void wait_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Four 8 x 8 bf16 matrices from shared memory. Lanes 8i .. 8i+7 give the row addresses of
// matrix i; afterwards lane l holds, in fragment[i], row l / 4, columns 2 (l % 4) and
// 2 (l % 4) + 1 of matrix i.
__device__ __forceinline__ void load_matrix_x4(unsigned (&fragment)[4], unsigned address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
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

// Starts the copy of rows [first_row, first_row + kRows) x columns [k0, k0 + kBlockK) of a
// row-major [num_rows, row_length] matrix into `tile` (pitch kSmemPitch). Rows at or past
// num_rows and columns at or past row_length (a multiple of 8) are zero-filled.
template <int kRows, int kThreads>
__device__ __forceinline__ void load_rows_async(__nv_bfloat16* tile,
                                                const __nv_bfloat16* __restrict__ matrix,
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
    const __nv_bfloat16* source =
        valid ? matrix + static_cast<size_t>(first_row + row) * row_length + (k0 + column) : matrix;
    copy_async_16(shared_address(tile + row * kSmemPitch + column), source, valid);
  }
}

}  // namespace

// out: [num_tokens, out_features]; input: [num_tokens, in_features]; weight: [out_features,
// in_features]; bf16, row-major, 16-byte aligned rows (in_features % 8 == 0 and
// out_features % 8 == 0). Launch: one block of kWarpsM * kWarpsN warps per BM x BN output
// tile, gridDim.x = cdiv(num_tokens, BM) * cdiv(out_features, BN), dynamic shared memory
// kStages * (BM + BN) * kSmemPitch * 2 bytes.
template <int kBlockM, int kBlockN, int kWarpsM, int kWarpsN, int kStages>
__global__ void __launch_bounds__((kWarpsM * kWarpsN * kWarpSize), 2)
    linear_kernel(__nv_bfloat16* __restrict__ out, const __nv_bfloat16* __restrict__ input,
                  const __nv_bfloat16* __restrict__ weight, int num_tokens, int in_features,
                  int out_features) {
  constexpr int kThreads = kWarpsM * kWarpsN * kWarpSize;
  constexpr int kWarpM = kBlockM / kWarpsM;  // rows of out per warp
  constexpr int kWarpN = kBlockN / kWarpsN;  // columns of out per warp
  constexpr int kFragmentsM = kWarpM / 16;   // m16 tiles per warp
  constexpr int kFragmentsN = kWarpN / 8;    // n8 tiles per warp
  constexpr int kStageElems = (kBlockM + kBlockN) * kSmemPitch;
  static_assert(kWarpM % 16 == 0, "a warp's rows are whole m16 tiles");
  static_assert(kWarpN % 16 == 0, "a warp's columns are pairs of n8 tiles (one ldmatrix.x4)");
  static_assert(kStages >= 2, "the pipeline overlaps at least one copy with the math");

  // Each stage holds kBlockM input rows, then kBlockN weight rows, of one 64-wide K slice.
  extern __shared__ __align__(16) unsigned char shared_storage[];
  __nv_bfloat16* const stages = reinterpret_cast<__nv_bfloat16*>(shared_storage);

  // Block -> output tile, in groups of kGroupTilesM row tiles (see the design notes).
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
    __nv_bfloat16* stage = stages + (k_tile % kStages) * kStageElems;
    const int k0 = k_tile * kBlockK;
    load_rows_async<kBlockM, kThreads>(stage, input, m0, num_tokens, k0, in_features);
    load_rows_async<kBlockN, kThreads>(stage + kBlockM * kSmemPitch, weight, n0, out_features, k0,
                                       in_features);
  };

  // Per-lane ldmatrix row offsets (elements, within a stage). A (input, 16 x 16 per m16 tile):
  // lanes 0-15 give rows 0-15 at k 0, lanes 16-31 rows 0-15 at k 8, so the four matrices are
  // exactly a0..a3 of mma.m16n8k16. B (weight rows = n, columns = k, which is the "col" operand
  // as stored): lanes 0-7 n 0-7 at k 0 (b0 of n8 tile j), 8-15 n 0-7 at k 8 (b1 of tile j),
  // 16-23 n 8-15 at k 0 (b0 of tile j + 1), 24-31 n 8-15 at k 8 (b1 of tile j + 1).
  const int a_offset = (warp_m0 + (lane & 15)) * kSmemPitch + (lane >> 4) * 8;
  const int b_offset =
      (kBlockM + warp_n0 + (lane & 7) + ((lane >> 4) << 3)) * kSmemPitch + ((lane >> 3) & 1) * 8;

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
    // Refill the stage slice k_tile - 1 used while this one is being multiplied.
    if (k_tile + kStages - 1 < k_tiles) load_stage(k_tile + kStages - 1);
    commit_copies();

    const unsigned stage =
        shared_address(stages + (k_tile % kStages) * kStageElems);  // bytes, shared window
#pragma unroll
    for (int kk = 0; kk < kBlockK; kk += 16) {
      unsigned a[kFragmentsM][4];
      unsigned b[kFragmentsN / 2][4];
#pragma unroll
      for (int i = 0; i < kFragmentsM; ++i) {
        load_matrix_x4(a[i], stage + 2 * (a_offset + i * 16 * kSmemPitch + kk));
      }
#pragma unroll
      for (int j = 0; j < kFragmentsN / 2; ++j) {
        load_matrix_x4(b[j], stage + 2 * (b_offset + j * 16 * kSmemPitch + kk));
      }
#pragma unroll
      for (int i = 0; i < kFragmentsM; ++i) {
#pragma unroll
        for (int j = 0; j < kFragmentsN; ++j) {
          mma_bf16_16x8x16(acc[i][j], a[i], b[j / 2][(j % 2) * 2], b[j / 2][(j % 2) * 2 + 1]);
        }
      }
    }
  }
  // Drain the (empty) trailing groups before the block exits.
  wait_copies<0>();

  // Epilogue. Lane l holds, per 16 x 8 tile, rows l / 4 and l / 4 + 8 at columns 2 (l % 4) and
  // 2 (l % 4) + 1: round each pair to bf16 and store it as one 4-byte word.
  const int lane_row = lane >> 2;
  const int lane_column = (lane & 3) * 2;
#pragma unroll
  for (int i = 0; i < kFragmentsM; ++i) {
    const int row = m0 + warp_m0 + i * 16 + lane_row;
#pragma unroll
    for (int j = 0; j < kFragmentsN; ++j) {
      const int column = n0 + warp_n0 + j * 8 + lane_column;
      if (column >= out_features) continue;  // the whole n8 tile is past the end
      if (row < num_tokens) {
        *reinterpret_cast<__nv_bfloat162*>(out + static_cast<size_t>(row) * out_features + column) =
            __floats2bfloat162_rn(acc[i][j][0], acc[i][j][1]);
      }
      if (row + 8 < num_tokens) {
        *reinterpret_cast<__nv_bfloat162*>(out + static_cast<size_t>(row + 8) * out_features +
                                           column) =
            __floats2bfloat162_rn(acc[i][j][2], acc[i][j][3]);
      }
    }
  }
}
