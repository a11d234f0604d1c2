// expect: incorrect
// task: llm/flash_attn_varlen_prefill
// Trick: aligns the causal mask top-left: query row i of a chunk sees keys 0 .. i, as if the
// chunk were the start of its sequence, so a block never needs seq_lens and a chunk's rows read
// only as many keys as the chunk has rows (a later 2048-token chunk of a 32k context would read
// 2048 keys instead of 32768). That is exactly right wherever a sequence's new tokens are its
// whole context (q_s == n_s: fresh prompts, and decode rows of one-token contexts), and it is
// the mask PyTorch's scaled_dot_product_attention gives is_causal for a rectangular query.
// Otherwise it is the example solution's kernel (tasks/llm/flash_attn_varlen_prefill/solution.cu).
// Caught: every case with a sequence whose q_s < n_s (a later chunk of a prompt, or a decode
// row) attends to the wrong keys there, far beyond the tolerance: already the visible cases
// chunk_2048_of_8k_llama, mixed_step_llama and chunk_2048_of_32k_llama (the fresh-prompt
// visible cases prompt_2048_llama, prompts_4_llama, prompt_8192_llama and prompts_3_qwen pass),
// and every hidden case but h_mha.
//
// clang-format off
// @launch top_left_causal<<<dim3(cdiv(num_tokens, 64) + num_seqs, num_heads), 256, 114688>>>(out, query, key_cache, value_cache, block_tables, cu_seqlens_q, seq_lens, scale, num_seqs, num_heads, num_kv_heads, block_size, max_blocks_per_seq)
// clang-format on

#include <cuda_bf16.h>

namespace {

constexpr int kHeadSize = 128;
constexpr int kTile = 64;  // query rows a block, keys a tile
constexpr int kThreads = 256;
constexpr int kGroups = 16;             // row groups (4 rows each), and threads of a row group
constexpr int kChunks = kHeadSize / 8;  // 16-byte pieces of a head's row
constexpr float kLog2e = 1.4426950408889634f;
constexpr int kQueryFloats = kHeadSize * kTile;  // query tile, [dim][row]
constexpr int kKeyFloats = kHeadSize * kTile;    // key tile, [dim][key]
constexpr int kValueFloats = kTile * kHeadSize;  // value tile, [key][dim]
constexpr int kWeightFloats = kTile * kTile;     // P, [row][key]
static_assert(4 * (kQueryFloats + kKeyFloats + kValueFloats + kWeightFloats) == 114688,
              "the launch directive's shared memory");
static_assert(kGroups * kGroups == kThreads && 4 * kGroups == kTile, "4 x 4 blocks of S");

__device__ float negative_infinity() { return __int_as_float(0xff800000); }

// Eight bf16 (16 bytes) to floats.
__device__ void unpack(const uint4& raw, float* x) {
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const float2 f = __bfloat1622float2(pairs[e]);
    x[2 * e] = f.x;
    x[2 * e + 1] = f.y;
  }
}

// The maximum and the sum over the 16 lanes of a half-warp (a row group); every lane of the
// warp must call them.
__device__ float row_group_max(float value) {
#pragma unroll
  for (int mask = 1; mask < kGroups; mask *= 2) {
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, mask));
  }
  return value;
}

__device__ float row_group_sum(float value) {
#pragma unroll
  for (int mask = 1; mask < kGroups; mask *= 2) {
    value += __shfl_xor_sync(0xffffffffu, value, mask);
  }
  return value;
}

}  // namespace

extern "C" __global__ void __launch_bounds__(kThreads, 2)
    top_left_causal(__nv_bfloat16* __restrict__ out, const __nv_bfloat16* __restrict__ query,
                    const __nv_bfloat16* __restrict__ key_cache,
                    const __nv_bfloat16* __restrict__ value_cache,
                    const int* __restrict__ block_tables, const int* __restrict__ cu_seqlens_q,
                    const int* __restrict__ seq_lens, float scale, int num_seqs, int num_heads,
                    int num_kv_heads, int block_size, int max_blocks_per_seq) {
  // This block's sequence and 64-row tile of it.
  int seq = -1;
  int tile = 0;
  for (int s = 0, before = 0; s < num_seqs; ++s) {
    const int tiles = (cu_seqlens_q[s + 1] - cu_seqlens_q[s] + kTile - 1) / kTile;
    if (static_cast<int>(blockIdx.x) < before + tiles) {
      seq = s;
      tile = tiles - 1 - (static_cast<int>(blockIdx.x) - before);  // the longest first
      break;
    }
    before += tiles;
  }
  if (seq < 0) return;

  extern __shared__ __align__(16) float smem[];
  float* const query_tile = smem;                     // [kHeadSize][kTile]
  float* const key_tile = query_tile + kQueryFloats;  // [kHeadSize][kTile]
  float* const value_tile = key_tile + kKeyFloats;    // [kTile][kHeadSize]
  float* const weights = value_tile + kValueFloats;   // [kTile][kTile]

  const int head = blockIdx.y;
  const int kv_head = head / (num_heads / num_kv_heads);
  const int first_token = cu_seqlens_q[seq];
  const int q_rows = cu_seqlens_q[seq + 1] - first_token;
  const int first_row = tile * kTile;               // of the sequence's query rows
  const int rows = min(kTile, q_rows - first_row);  // >= 1
  // The trick: positions as if the chunk started its sequence (seq_lens[seq] - q_rows is right).
  const int offset = 0;                                // position of query row i: offset + i
  const int last_key = offset + first_row + rows - 1;  // the last row's position
  const int* const table = block_tables + static_cast<long long>(seq) * max_blocks_per_seq;
  const long long token_stride = static_cast<long long>(num_kv_heads) * kHeadSize;

  const int t = threadIdx.x;
  const int group = t / kGroups;  // rows 4 group .. 4 group + 3
  const int lane = t % kGroups;   // keys 4 lane .. + 3; columns 4 lane .. + 3, 64 + 4 lane .. + 3
  const int gather_row = t % kTile;  // the row (query or key) this thread copies, transposed

  // The query tile, transposed; rows past the chunk's end are zeros.
#pragma unroll
  for (int i = 0; i < kChunks / (kThreads / kTile); ++i) {
    const int chunk = t / kTile + (kThreads / kTile) * i;
    float x[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    if (gather_row < rows) {
      const long long token = first_token + first_row + gather_row;
      unpack(*reinterpret_cast<const uint4*>(query + (token * num_heads + head) * kHeadSize +
                                             chunk * 8),
             x);
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) query_tile[(chunk * 8 + e) * kTile + gather_row] = x[e];
  }

  // Position of each of this thread's rows (past the end: the last row's).
  int position[4];
#pragma unroll
  for (int r = 0; r < 4; ++r) position[r] = offset + first_row + min(4 * group + r, rows - 1);

  float row_max[4];  // running maximum of the row's scores, log2 units (the same in the group)
  float row_sum[4];  // this thread's share of the running sum of the row's weights
  float acc[4][8];   // unnormalised output: columns 4 lane + c, then 64 + 4 lane + c
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    row_max[r] = negative_infinity();
    row_sum[r] = 0.0f;
#pragma unroll
    for (int c = 0; c < 8; ++c) acc[r][c] = 0.0f;
  }
  const float scale_log2 = scale * kLog2e;

  for (int tile_start = 0; tile_start <= last_key; tile_start += kTile) {
    __syncthreads();  // the previous tile's keys and values are no longer read

    // Keys (transposed) and values of keys tile_start .. + 63; keys past last_key are zeros and
    // their blocks are not read.
    {
      const int key = tile_start + gather_row;
      float x[kChunks / (kThreads / kTile)][8] = {};
      if (key <= last_key) {
        const long long block = table[key / block_size];
        const __nv_bfloat16* const row = key_cache +
                                         (block * block_size + key % block_size) * token_stride +
                                         static_cast<long long>(kv_head) * kHeadSize;
#pragma unroll
        for (int i = 0; i < kChunks / (kThreads / kTile); ++i) {
          unpack(*reinterpret_cast<const uint4*>(row + (t / kTile + (kThreads / kTile) * i) * 8),
                 x[i]);
        }
      }
#pragma unroll
      for (int i = 0; i < kChunks / (kThreads / kTile); ++i) {
        const int chunk = t / kTile + (kThreads / kTile) * i;
#pragma unroll
        for (int e = 0; e < 8; ++e) key_tile[(chunk * 8 + e) * kTile + gather_row] = x[i][e];
      }
    }
#pragma unroll
    for (int i = 0; i < kTile / (kThreads / kChunks); ++i) {
      const int chunk = t % kChunks;
      const int j = t / kChunks + (kThreads / kChunks) * i;
      const int key = tile_start + j;
      float x[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
      if (key <= last_key) {
        const long long block = table[key / block_size];
        unpack(*reinterpret_cast<const uint4*>(
                   value_cache + (block * block_size + key % block_size) * token_stride +
                   static_cast<long long>(kv_head) * kHeadSize + chunk * 8),
               x);
      }
      float4* const to = reinterpret_cast<float4*>(value_tile + j * kHeadSize + chunk * 8);
      to[0] = make_float4(x[0], x[1], x[2], x[3]);
      to[1] = make_float4(x[4], x[5], x[6], x[7]);
    }
    __syncthreads();  // the tiles (and, the first time, the query tile) are complete

    // S = Q K^T for this thread's 4 rows x 4 keys.
    float s[4][4];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
#pragma unroll
      for (int c = 0; c < 4; ++c) s[r][c] = 0.0f;
    }
#pragma unroll 8
    for (int d = 0; d < kHeadSize; ++d) {
      const float4 a = *reinterpret_cast<const float4*>(query_tile + d * kTile + 4 * group);
      const float4 b = *reinterpret_cast<const float4*>(key_tile + d * kTile + 4 * lane);
      const float qa[4] = {a.x, a.y, a.z, a.w};
      const float kb[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
      for (int r = 0; r < 4; ++r) {
#pragma unroll
        for (int c = 0; c < 4; ++c) s[r][c] = fmaf(qa[r], kb[c], s[r][c]);
      }
    }

    // Online softmax per row; P to shared memory, the accumulators rescaled.
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      float x[4];
      float tile_max = negative_infinity();
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int key = tile_start + 4 * lane + c;
        x[c] = key <= position[r] ? s[r][c] * scale_log2 : negative_infinity();
        tile_max = fmaxf(tile_max, x[c]);
      }
      tile_max = row_group_max(tile_max);
      // Finite: key 0 is visible to every row, so the first tile sets a finite maximum.
      const float new_max = fmaxf(row_max[r], tile_max);
      const float factor = exp2f(row_max[r] - new_max);  // 0 on the first tile
      row_max[r] = new_max;
      float p[4];
#pragma unroll
      for (int c = 0; c < 4; ++c) p[c] = exp2f(x[c] - new_max);  // 0 for hidden keys
      row_sum[r] = row_sum[r] * factor + ((p[0] + p[1]) + (p[2] + p[3]));
      *reinterpret_cast<float4*>(weights + (4 * group + r) * kTile + 4 * lane) =
          make_float4(p[0], p[1], p[2], p[3]);
#pragma unroll
      for (int c = 0; c < 8; ++c) acc[r][c] *= factor;
    }
    __syncwarp();  // the row group's weights are written (the same half-warp reads them)

    // O += P V over the tile's keys, four at a time.
#pragma unroll 2
    for (int j = 0; j < kTile; j += 4) {
      float4 w[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        w[r] = *reinterpret_cast<const float4*>(weights + (4 * group + r) * kTile + j);
      }
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float4 v0 =
            *reinterpret_cast<const float4*>(value_tile + (j + k) * kHeadSize + 4 * lane);
        const float4 v1 =
            *reinterpret_cast<const float4*>(value_tile + (j + k) * kHeadSize + 64 + 4 * lane);
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const float p = k == 0 ? w[r].x : k == 1 ? w[r].y : k == 2 ? w[r].z : w[r].w;
          acc[r][0] = fmaf(p, v0.x, acc[r][0]);
          acc[r][1] = fmaf(p, v0.y, acc[r][1]);
          acc[r][2] = fmaf(p, v0.z, acc[r][2]);
          acc[r][3] = fmaf(p, v0.w, acc[r][3]);
          acc[r][4] = fmaf(p, v1.x, acc[r][4]);
          acc[r][5] = fmaf(p, v1.y, acc[r][5]);
          acc[r][6] = fmaf(p, v1.z, acc[r][6]);
          acc[r][7] = fmaf(p, v1.w, acc[r][7]);
        }
      }
    }
  }

  // Normalise and store the rows inside the chunk, 4 bf16 (8 bytes) at a time.
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const float inverse = 1.0f / row_group_sum(row_sum[r]);  // >= 1: the maximum weighs 1
    const int row = 4 * group + r;
    if (row < rows) {
      __nv_bfloat16* const to =
          out +
          (static_cast<long long>(first_token + first_row + row) * num_heads + head) * kHeadSize;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const __nv_bfloat162 lo =
            __floats2bfloat162_rn(acc[r][4 * half] * inverse, acc[r][4 * half + 1] * inverse);
        const __nv_bfloat162 hi =
            __floats2bfloat162_rn(acc[r][4 * half + 2] * inverse, acc[r][4 * half + 3] * inverse);
        uint2 packed;
        packed.x = *reinterpret_cast<const unsigned*>(&lo);
        packed.y = *reinterpret_cast<const unsigned*>(&hi);
        *reinterpret_cast<uint2*>(to + 64 * half + 4 * lane) = packed;
      }
    }
  }
}
