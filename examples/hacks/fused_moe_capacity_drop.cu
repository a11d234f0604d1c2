// expect: incorrect
// task: llm/fused_moe
// Trick: GShard/Switch-style token dropping: every expert takes at most `capacity` slots, the
// first ones in token order, and the rest are dropped (their contribution is zero), as a
// capacity-limited MoE layer drops overflow tokens; a fixed budget per expert bounds the
// hottest expert's work. Otherwise exact (fp32 CUDA-core GEMMs, as the task's example
// solution). The papers' capacity, a factor times the mean load num_tokens * topk /
// num_experts, would fail visible cases under the task's skewed routing: over 20 episode
// seeds and both correctness draws the hottest expert reaches 7.95x the mean
// (deepseek_v3_tp8_prefill_2048), 7.5x (qwen3_30b_decode_64) and 5.43x
// (qwen3_30b_prefill_8192). So the budget is a share of the batch instead: capacity =
// max(64, 3 * num_tokens / 4). No visible case comes near it: the hottest expert takes at most
// 20 of 32 tokens (mixtral_tp2_decode_32, under the 64-slot floor), 116 of 256
// (qwen3_30b_decode_256, 45 %) and 755 of 2048 (mixtral_tp2_prefill_2048, 37 %); nor does any
// other hidden case (at most 55 %: h_widths_1000_200, 182 of 333 tokens).
// Caught: the hidden case h_one_hot_set (skew 200: all 1000 tokens routed to the same 6 of 32
// experts, 1000 slots each, 5.33x the mean of 187.5, so a capacity factor of 8 would pass it
// too): the capacity is 750, so tokens 750 to 999 lose all six slots and their outputs are 0
// instead of values of about unit scale, far outside atol 3e-2 + rtol 1.6e-2.
//
// clang-format off
// @workspace kept int[num_tokens * topk]
// @workspace sorted_rows int[num_tokens * topk]
// @workspace tiles int4[cdiv(num_tokens * topk, 64) + num_experts]
// @workspace act float[num_tokens * topk * intermediate_size]
// @workspace slots float[num_tokens * topk * hidden_size]
// @launch moe_capacity<<<num_experts, 1024>>>(topk_ids, kept, num_tokens, topk)
// @launch moe_group_kept<<<1, 1024>>>(topk_ids, kept, sorted_rows, tiles, num_tokens, topk, num_experts)
// @launch moe_gate_up<<<dim3(cdiv(num_tokens * topk, 64) + num_experts, cdiv(intermediate_size, 64)), 256>>>(act, hidden_states, w1, sorted_rows, tiles, topk, hidden_size, intermediate_size)
// @launch moe_down<<<dim3(cdiv(num_tokens * topk, 64) + num_experts, cdiv(hidden_size, 128)), 256>>>(slots, act, w2, topk_weights, sorted_rows, tiles, hidden_size, intermediate_size)
// @launch moe_sum_kept<<<cdiv(num_tokens * hidden_size, 256), 256>>>(out, slots, kept, topk, hidden_size, num_tokens)
// clang-format on

#include <cuda_bf16.h>

namespace {

using Bf16 = __nv_bfloat16;

constexpr int kMinCapacity = 64;   // slots every expert may take, whatever the batch
constexpr int kMaxExperts = 1024;  // the task's bound on num_experts
constexpr int kTileRows = 64;
constexpr int kTileCols = 128;
constexpr int kStep = 32;
constexpr int kPitch = kStep + 1;
constexpr int kThreads = 256;

struct Stage {
  float a[kTileRows][kPitch];
  float b[kTileCols][kPitch];
};

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

__device__ int load_tile(const int4* tiles, const int* sorted_rows, int* rows) {
  const int4 tile = tiles[blockIdx.x];
  if (tile.x >= 0 && threadIdx.x < kTileRows) {
    rows[threadIdx.x] = threadIdx.x < tile.z ? sorted_rows[tile.y + threadIdx.x] : -1;
  }
  __syncthreads();
  return tile.x;
}

}  // namespace

// Block e walks the slots in order and keeps the first `capacity` routed to expert e.
extern "C" __global__ void moe_capacity(const int* topk_ids, int* kept, int num_tokens, int topk) {
  __shared__ int warp_counts[32];
  __shared__ int taken;
  const int capacity = max(kMinCapacity, 3 * num_tokens / 4);
  const int slots = num_tokens * topk;
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  if (threadIdx.x == 0) taken = 0;
  __syncthreads();
  for (int start = 0; start < slots; start += blockDim.x) {
    const int r = start + threadIdx.x;
    const bool mine = r < slots && topk_ids[r] == static_cast<int>(blockIdx.x);
    const unsigned ballot = __ballot_sync(0xffffffffu, mine);
    if (lane == 0) warp_counts[warp] = __popc(ballot);
    __syncthreads();
    int before = taken + __popc(ballot & ((1u << lane) - 1u));
    for (int w = 0; w < warp; ++w) before += warp_counts[w];
    if (mine) kept[r] = before < capacity ? 1 : 0;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) taken += warp_counts[w];
    }
    __syncthreads();
  }
}

// The example solution's grouping, of the kept slots only.
extern "C" __global__ void moe_group_kept(const int* topk_ids, const int* kept, int* sorted_rows,
                                          int4* tiles, int num_tokens, int topk, int num_experts) {
  __shared__ int counts[kMaxExperts];
  __shared__ int used_tiles;
  const int slots = num_tokens * topk;
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x) counts[e] = 0;
  __syncthreads();
  for (int r = threadIdx.x; r < slots; r += blockDim.x) {
    if (kept[r]) atomicAdd(&counts[topk_ids[r]], 1);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int start = 0;
    int tile = 0;
    for (int e = 0; e < num_experts; ++e) {
      const int count = counts[e];
      for (int first = 0; first < count; first += kTileRows) {
        tiles[tile++] = make_int4(e, start + first, min(kTileRows, count - first), 0);
      }
      counts[e] = start;
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
    if (kept[r]) sorted_rows[atomicAdd(&counts[topk_ids[r]], 1)] = r;
  }
}

extern "C" __global__ void __launch_bounds__(kThreads)
    moe_gate_up(float* act, const Bf16* hidden_states, const Bf16* w1, const int* sorted_rows,
                const int4* tiles, int topk, int hidden_size, int intermediate_size) {
  __shared__ Stage s;
  __shared__ int rows[kTileRows];
  const int expert = load_tile(tiles, sorted_rows, rows);
  if (expert < 0) return;
  const int tid = threadIdx.x;
  const int n0 = blockIdx.y * 64;
  const size_t hidden = hidden_size;
  const size_t inter = intermediate_size;
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
    const bool in_k = k < hidden_size;
    const uint4 xv = load_16_bytes(x + k, slot >= 0 && in_k);
    const uint4 gv = load_16_bytes(gate + k, n_in && in_k);
    const uint4 uv = load_16_bytes(up + k, n_in && in_k);
    __syncthreads();
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
      act[static_cast<size_t>(r) * inter + column] = g / (1.0f + expf(-g)) * acc[i][j + 4];
    }
  }
}

extern "C" __global__ void __launch_bounds__(kThreads)
    moe_down(float* slots, const float* act, const Bf16* w2, const float* topk_weights,
             const int* sorted_rows, const int4* tiles, int hidden_size, int intermediate_size) {
  __shared__ Stage s;
  __shared__ int rows[kTileRows];
  const int expert = load_tile(tiles, sorted_rows, rows);
  if (expert < 0) return;
  const int tid = threadIdx.x;
  const int h0 = blockIdx.y * kTileCols;
  const size_t hidden = hidden_size;
  const size_t inter = intermediate_size;
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
    const float weight = topk_weights[r];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int h = h0 + tx + 16 * j;
      if (h < hidden_size) slots[static_cast<size_t>(r) * hidden + h] = weight * acc[i][j];
    }
  }
}

// The per-token sum over the kept slots: a dropped slot adds nothing.
extern "C" __global__ void moe_sum_kept(Bf16* out, const float* slots, const int* kept, int topk,
                                        int hidden_size, int num_tokens) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<size_t>(num_tokens) * hidden_size) return;
  const size_t token = i / hidden_size;
  const size_t h = i % hidden_size;
  float sum = 0.0f;
  for (int j = 0; j < topk; ++j) {
    const size_t r = token * topk + j;
    if (kept[r]) sum += slots[r * hidden_size + h];
  }
  out[i] = __float2bfloat16_rn(sum);
}
