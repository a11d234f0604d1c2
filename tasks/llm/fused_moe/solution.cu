// A correct, deliberately simple solution for llm/fused_moe: the reference's four steps with
// plain fp32 FMAs on the CUDA cores instead of tensor cores.
//
//   1. moe_group_simple: one block groups the flat slots r = t * topk + j by expert
//      (shared-memory counters, a serial walk over the experts, a second pass of atomics that
//      hands each slot its place in its expert's segment) and cuts every segment into tiles of
//      at most 64 slots: tiles[b] = (expert, first sorted position, rows), expert -1 past the
//      last tile.
//   2. moe_gate_up_simple: one block per (tile, 64 activation columns). The tile's rows x_t are
//      gathered by token, the 64 gate rows and the 64 matching up rows of the expert's w1 form
//      one 128-column operand, K (hidden_size) advances 32 at a time through shared memory as
//      fp32, and each of the 256 threads keeps a 4-row x 8-column tile of sums in registers
//      (4 gate and the 4 matching up columns). The epilogue writes act = silu(g) * u in fp32 at
//      the slot's flat index.
//   3. moe_down_simple: the same tile product of act's rows against the expert's w2 (128 hidden
//      features a block, K = intermediate_size); each slot's output times its routing weight
//      goes to `slots` in fp32.
//   4. moe_sum_simple: out[t, h] = the fp32 sum of token t's topk slot rows, rounded once.
//
// Every product accumulates in fp32 and act is kept in fp32, so out is rounded once, at the
// end. Slower than the reference: fp32 FMAs on CUDA cores (about 67 TFLOP/s at best, against
// about 990 for bf16 tensor cores), operands copied to shared memory by synchronous loads with
// two barriers a K step, fp32 intermediates (twice the bytes of the reference's bf16 ones). On
// an H200 it runs the prefill cases at about 29 TFLOP/s (21 ms for qwen3_30b_prefill_8192,
// 25 ms for mixtral_tp2_prefill_2048) and the decode cases in 0.7 to 4.5 ms, where its few,
// long K loops leave most of the GPU idle. Right on every shape: tile rows past an expert's
// segment and columns past intermediate_size or hidden_size are computed on zeros and never
// stored, K past the end is zero-filled, and widths need only be multiples of 8 (16-byte
// loads).
//
// clang-format off
// @workspace sorted_rows int[num_tokens * topk]
// @workspace tiles int4[cdiv(num_tokens * topk, 64) + num_experts]
// @workspace act float[num_tokens * topk * intermediate_size]
// @workspace slots float[num_tokens * topk * hidden_size]
// @launch moe_group_simple<<<1, 1024>>>(topk_ids, sorted_rows, tiles, num_tokens, topk, num_experts)
// @launch moe_gate_up_simple<<<dim3(cdiv(num_tokens * topk, 64) + num_experts, cdiv(intermediate_size, 64)), 256>>>(act, hidden_states, w1, sorted_rows, tiles, topk, hidden_size, intermediate_size)
// @launch moe_down_simple<<<dim3(cdiv(num_tokens * topk, 64) + num_experts, cdiv(hidden_size, 128)), 256>>>(slots, act, w2, topk_weights, sorted_rows, tiles, hidden_size, intermediate_size)
// @launch moe_sum_simple<<<cdiv(num_tokens * hidden_size, 256), 256>>>(out, slots, topk, hidden_size, num_tokens)
// clang-format on

#include <cuda_bf16.h>

namespace {

using Bf16 = __nv_bfloat16;

constexpr int kMaxExperts = 1024;  // the task's bound on num_experts
constexpr int kTileRows = 64;      // slots of one expert per tile (the directives' 64)
constexpr int kTileCols = 128;     // columns of the second operand per block
constexpr int kStep = 32;          // K per shared-memory stage
constexpr int kPitch = kStep + 1;  // floats per staged row: rows of a column fall on new banks
constexpr int kThreads = 256;      // 16 x 16 threads, each 4 rows x 8 columns of the tile

// One K step of both operands, row-major in K: a[row][k] and b[column][k].
struct Stage {
  float a[kTileRows][kPitch];
  float b[kTileCols][kPitch];
};

// Eight bf16 (one 16-byte load) as floats into dst[0..7].
__device__ void store_bf16x8(float* dst, uint4 v) {
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const float2 f = __bfloat1622float2(pairs[q]);
    dst[2 * q] = f.x;
    dst[2 * q + 1] = f.y;
  }
}

__device__ uint4 load_16_bytes(const void* p, bool valid) {
  return valid ? *reinterpret_cast<const uint4*>(p) : make_uint4(0, 0, 0, 0);
}

// acc[i][j] += sum over the stage's k of a[ty + 16 i][k] * b[tx + 16 j][k]. Within a warp, tx
// runs over 16 consecutive columns (16 banks, pitch 33) and ty takes two values (broadcasts).
__device__ void multiply_stage(const Stage& s, float (&acc)[4][8], int tx, int ty) {
#pragma unroll
  for (int k = 0; k < kStep; ++k) {
    float a[4], b[8];
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = s.a[ty + 16 * i][k];
#pragma unroll
    for (int j = 0; j < 8; ++j) b[j] = s.b[tx + 16 * j][k];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
  }
}

// The tile of this block (blockIdx.x): its expert (-1 past the last tile) and, in rows[], the
// flat slot index of each of its 64 rows (-1 past the tile's rows).
__device__ int load_tile(const int4* tiles, const int* sorted_rows, int* rows) {
  const int4 tile = tiles[blockIdx.x];
  if (tile.x >= 0 && threadIdx.x < kTileRows) {
    rows[threadIdx.x] = threadIdx.x < tile.z ? sorted_rows[tile.y + threadIdx.x] : -1;
  }
  __syncthreads();
  return tile.x;
}

}  // namespace

extern "C" __global__ void moe_group_simple(const int* topk_ids, int* sorted_rows, int4* tiles,
                                            int num_tokens, int topk, int num_experts) {
  __shared__ int counts[kMaxExperts];
  __shared__ int used_tiles;
  const int slots = num_tokens * topk;
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x) counts[e] = 0;
  __syncthreads();
  for (int r = threadIdx.x; r < slots; r += blockDim.x) atomicAdd(&counts[topk_ids[r]], 1);
  __syncthreads();
  if (threadIdx.x == 0) {
    int start = 0;
    int tile = 0;
    for (int e = 0; e < num_experts; ++e) {
      const int count = counts[e];
      for (int first = 0; first < count; first += kTileRows) {
        tiles[tile++] = make_int4(e, start + first, min(kTileRows, count - first), 0);
      }
      counts[e] = start;  // from here on the next free position of the expert's segment
      start += count;
    }
    used_tiles = tile;
  }
  __syncthreads();
  const int max_tiles = (slots + kTileRows - 1) / kTileRows + num_experts;
  for (int b = used_tiles + threadIdx.x; b < max_tiles; b += blockDim.x) {
    tiles[b] = make_int4(-1, 0, 0, 0);
  }
  for (int r = threadIdx.x; r < slots; r += blockDim.x) {
    sorted_rows[atomicAdd(&counts[topk_ids[r]], 1)] = r;
  }
}

extern "C" __global__ void __launch_bounds__(kThreads)
    moe_gate_up_simple(float* act, const Bf16* hidden_states, const Bf16* w1,
                       const int* sorted_rows, const int4* tiles, int topk, int hidden_size,
                       int intermediate_size) {
  __shared__ Stage s;
  __shared__ int rows[kTileRows];
  const int expert = load_tile(tiles, sorted_rows, rows);
  if (expert < 0) return;
  const int tid = threadIdx.x;
  const int n0 = blockIdx.y * 64;
  const size_t hidden = hidden_size;
  const size_t inter = intermediate_size;

  // This thread's 16-byte loads per K step: 8 values of x for tile row tid / 4, and 8 values of
  // w1 for operand columns tid / 4 (a gate row) and 64 + tid / 4 (the matching up row), all at
  // K offset (tid % 4) * 8.
  const int chunk = tid % 4;
  const int a_row = tid / 4;
  const int slot = rows[a_row];
  const Bf16* x = hidden_states + static_cast<size_t>(slot >= 0 ? slot / topk : 0) * hidden;
  const int n = n0 + tid / 4;
  const bool n_in = n < intermediate_size;
  const Bf16* gate = w1 + (static_cast<size_t>(expert) * 2 * inter + (n_in ? n : 0)) * hidden;
  const Bf16* up = gate + inter * hidden;

  float acc[4][8] = {};
  for (int k0 = 0; k0 < hidden_size; k0 += kStep) {
    const int k = k0 + chunk * 8;
    const bool in_k = k < hidden_size;  // hidden_size % 8 == 0: a chunk is in or out whole
    const uint4 xv = load_16_bytes(x + k, slot >= 0 && in_k);
    const uint4 gv = load_16_bytes(gate + k, n_in && in_k);
    const uint4 uv = load_16_bytes(up + k, n_in && in_k);
    __syncthreads();  // the previous stage is consumed
    store_bf16x8(&s.a[a_row][chunk * 8], xv);
    store_bf16x8(&s.b[tid / 4][chunk * 8], gv);
    store_bf16x8(&s.b[64 + tid / 4][chunk * 8], uv);
    __syncthreads();
    multiply_stage(s, acc, tid % 16, tid / 16);
  }

  const int tx = tid % 16;
  const int ty = tid / 16;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = rows[ty + 16 * i];
    if (r < 0) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int column = n0 + tx + 16 * j;
      if (column >= intermediate_size) continue;
      const float g = acc[i][j];
      const float u = acc[i][j + 4];  // operand column 64 + tx + 16 j: the matching up row
      act[static_cast<size_t>(r) * inter + column] = g / (1.0f + expf(-g)) * u;
    }
  }
}

extern "C" __global__ void __launch_bounds__(kThreads)
    moe_down_simple(float* slots, const float* act, const Bf16* w2, const float* topk_weights,
                    const int* sorted_rows, const int4* tiles, int hidden_size,
                    int intermediate_size) {
  __shared__ Stage s;
  __shared__ int rows[kTileRows];
  const int expert = load_tile(tiles, sorted_rows, rows);
  if (expert < 0) return;
  const int tid = threadIdx.x;
  const int h0 = blockIdx.y * kTileCols;
  const size_t hidden = hidden_size;
  const size_t inter = intermediate_size;

  // Per K step: two float4 of act (tile rows idx / 8 at K offset (idx % 8) * 4, idx = tid and
  // tid + 256) and two 16-byte chunks of w2 (features idx / 4 at K offset (idx % 4) * 8). A
  // source past the tile's rows or hidden_size is never read.
  const float* a_src[2];
  const Bf16* b_src[2];
  bool a_row_in[2], b_row_in[2];
  for (int p = 0; p < 2; ++p) {
    const int idx = tid + kThreads * p;
    const int r = rows[idx / 8];
    a_row_in[p] = r >= 0;
    a_src[p] = act + static_cast<size_t>(a_row_in[p] ? r : 0) * inter + (idx % 8) * 4;
    const int h = h0 + idx / 4;
    b_row_in[p] = h < hidden_size;
    b_src[p] =
        w2 + (static_cast<size_t>(expert) * hidden + (b_row_in[p] ? h : 0)) * inter + (idx % 4) * 8;
  }

  float acc[4][8] = {};
  for (int k0 = 0; k0 < intermediate_size; k0 += kStep) {
    float4 av[2];
    uint4 bv[2];
    for (int p = 0; p < 2; ++p) {
      const int idx = tid + kThreads * p;
      // intermediate_size % 8 == 0: a chunk of 4 or 8 is in or out whole.
      const bool a_in = a_row_in[p] && k0 + (idx % 8) * 4 < intermediate_size;
      av[p] = a_in ? *reinterpret_cast<const float4*>(a_src[p] + k0) : make_float4(0, 0, 0, 0);
      bv[p] = load_16_bytes(b_src[p] + k0, b_row_in[p] && k0 + (idx % 4) * 8 < intermediate_size);
    }
    __syncthreads();
    for (int p = 0; p < 2; ++p) {
      const int idx = tid + kThreads * p;
      float* a_dst = &s.a[idx / 8][(idx % 8) * 4];
      a_dst[0] = av[p].x;
      a_dst[1] = av[p].y;
      a_dst[2] = av[p].z;
      a_dst[3] = av[p].w;
      store_bf16x8(&s.b[idx / 4][(idx % 4) * 8], bv[p]);
    }
    __syncthreads();
    multiply_stage(s, acc, tid % 16, tid / 16);
  }

  const int tx = tid % 16;
  const int ty = tid / 16;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = rows[ty + 16 * i];
    if (r < 0) continue;
    const float weight = topk_weights[r];  // r = t * topk + j, the layout of topk_weights
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int h = h0 + tx + 16 * j;
      if (h < hidden_size) slots[static_cast<size_t>(r) * hidden + h] = weight * acc[i][j];
    }
  }
}

extern "C" __global__ void moe_sum_simple(Bf16* out, const float* slots, int topk, int hidden_size,
                                          int num_tokens) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<size_t>(num_tokens) * hidden_size) return;
  const size_t token = i / hidden_size;
  const size_t h = i % hidden_size;
  float sum = 0.0f;
  for (int j = 0; j < topk; ++j) sum += slots[(token * topk + j) * hidden_size + h];
  out[i] = __float2bfloat16_rn(sum);
}
