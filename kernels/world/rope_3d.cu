// Reference for world/rope_3d: V-JEPA 2's 3-D rotary embedding of query and key, in place, bf16.
//
// Device code only, compiled by NVRTC for sm_90a and launched as the directives below say (see
// kernels/llm/rms_norm.cu for the conventions). qkv is [tokens, 3, num_heads, head_dim]; the
// query (slot 0) and key (slot 1) heads of a token are rotated, the value (slot 2) is neither
// read nor written. Element c < 3 s of a head (s = 2 * floor(floor(head_dim / 3) / 2)) turns
// by theta = p_a * 10000^(-j / half), a = c / s its axis (frame, row, column), j = (c - a s) mod
// half, p_a the token's position on that axis; the pair partner of c is c + 1 (negated) for
// even c and c - 1 for odd c:
//
//   x'[c] = x[c] * cos(theta) + partner * sin(theta)     (fp32 from bf16, one rounding to bf16)
//
// Launch plan: 8 tokens per block. The block first builds, in shared memory, every element's
// (cos, sin) for each of its tokens (cos 1, sin 0 past 3 s), then streams the tokens' query and
// key heads in chunks of 8 elements (one 16-byte vector) when head_dim is a multiple of 8, of 2
// elements otherwise. head_dim must be even and at most 256 (the table's width).
//
// clang-format off
// @launch if (head_dim % 8 == 0) rope_3d_vec8_kernel<<<cdiv(batch * num_tokens, 8), 256>>>(qkv, token_ids, batch, num_tokens, num_heads, head_dim, grid_h, grid_w)
// @launch if (head_dim % 8 != 0) rope_3d_vec2_kernel<<<cdiv(batch * num_tokens, 8), 256>>>(qkv, token_ids, batch, num_tokens, num_heads, head_dim, grid_h, grid_w)
// clang-format on
//
// Design notes (why, for whoever optimises this next):
// - Memory bound: 3 FLOPs per 4 bytes moved. What matters is one read and one write of every
//   query and key element with many loads in flight: each thread loads four chunks before it
//   computes and stores any (the compiler cannot reorder loads past stores into the same
//   buffer on its own).
// - The angles depend on the token and the element only, and are shared by 2 * num_heads heads
//   (44 for ViT-g), so they are computed once per token into a per-element table: the streaming
//   loop does two shared loads and two FMAs per element, no division or transcendental. An
//   element-indexed table (rather than one per frequency) removes the c -> (axis, j) mapping
//   from the hot loop; it costs 8 tokens x 256 x 8 bytes = 16 KiB of shared memory.
// - omega_j = 10000^(-j / half) in double, rounded to fp32 once per block (half values), then
//   theta = p * omega_j in fp32 and sincosf (full range reduction; |theta| < 64 here): within
//   a few ulps of exact. A double pow per table entry (8 x head_dim per block) cost more than
//   the block's streaming, since a launch is about one wave of blocks.
// - The first four chunks of each thread are loaded before the table is built.
// - q and k heads of a token are contiguous ([3, num_heads, head_dim] per token, slots 0 and
//   1), so a token's work is one flat run of 2 * num_heads * head_dim elements.

#include <cuda_bf16.h>

namespace {

constexpr int kTokensPerBlock = 8;
constexpr int kThreads = 256;
constexpr int kMaxHeadDim = 256;
// Chunks each thread loads before computing any.
constexpr int kBatch = 4;

template <int kElems>
struct Chunk;

template <>
struct Chunk<8> {
  using Bits = uint4;
};

template <>
struct Chunk<2> {
  using Bits = unsigned int;
};

template <int kElems>
__device__ __forceinline__ void rope_3d_block(__nv_bfloat16* __restrict__ qkv,
                                              const long long* __restrict__ token_ids, int batch,
                                              int num_tokens, int num_heads, int head_dim,
                                              int grid_h, int grid_w) {
  using Bits = typename Chunk<kElems>::Bits;
  __shared__ float2 table[kTokensPerBlock][kMaxHeadDim];

  const long long total = static_cast<long long>(batch) * num_tokens;
  const long long first = static_cast<long long>(blockIdx.x) * kTokensPerBlock;
  const int s = 2 * ((head_dim / 3) / 2);
  const int half = s / 2;
  const long long plane = static_cast<long long>(grid_h) * grid_w;

  const long long remaining = total - first;
  const int tokens = remaining < kTokensPerBlock ? static_cast<int>(remaining) : kTokensPerBlock;
  const int chunks_per_token = 2 * num_heads * head_dim / kElems;
  const int chunks = tokens * chunks_per_token;
  const long long token_stride = 3LL * num_heads * head_dim;

  // The first batch of chunks is loaded before the angle table is built, so its DRAM latency
  // overlaps the table's arithmetic and barriers.
  Bits bits[kBatch];
  __nv_bfloat16* where[kBatch];
  int tk_of[kBatch];
  int c_of[kBatch];
  auto load_batch = [&](int base) {
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = base + b * kThreads;
      where[b] = nullptr;
      if (i < chunks) {
        const int tk = i / chunks_per_token;
        const int e = (i - tk * chunks_per_token) * kElems;  // element in the token's q|k run
        tk_of[b] = tk;
        c_of[b] = e % head_dim;
        where[b] = qkv + (first + tk) * token_stride + e;
        bits[b] = *reinterpret_cast<const Bits*>(where[b]);
      }
    }
  };
  load_batch(threadIdx.x);

  // omega_j = 10000^(-j / half) in double, once per block.
  __shared__ float omega[kMaxHeadDim / 6 + 1];
  for (int j = threadIdx.x; j < half; j += kThreads) {
    omega[j] = static_cast<float>(pow(10000.0, -static_cast<double>(j) / half));
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kTokensPerBlock * head_dim; i += kThreads) {
    const int tk = i / head_dim;
    const int c = i - tk * head_dim;
    float2 cs = make_float2(1.0f, 0.0f);
    const long long token = first + tk;
    if (c < 3 * s && token < total) {
      const int axis = c / s;
      const int j = (c - axis * s) % half;
      const long long n = token_ids[token];
      const long long p = axis == 0 ? n / plane : axis == 1 ? (n % plane) / grid_w : n % grid_w;
      sincosf(static_cast<float>(p) * omega[j], &cs.y, &cs.x);
    }
    table[tk][c] = cs;
  }
  __syncthreads();

  for (int base = threadIdx.x; base < chunks; base += kThreads * kBatch) {
    if (base != threadIdx.x) load_batch(base);
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      if (where[b] == nullptr) continue;
      __nv_bfloat162* pairs = reinterpret_cast<__nv_bfloat162*>(&bits[b]);
      const float2* angles = &table[tk_of[b]][c_of[b]];
#pragma unroll
      for (int k = 0; k < kElems / 2; ++k) {
        const float2 x = __bfloat1622float2(pairs[k]);
        const float2 a0 = angles[2 * k];
        const float2 a1 = angles[2 * k + 1];
        pairs[k] = __floats2bfloat162_rn(x.x * a0.x - x.y * a0.y, x.y * a1.x + x.x * a1.y);
      }
      *reinterpret_cast<Bits*>(where[b]) = bits[b];
    }
  }
}

}  // namespace

extern "C" __global__ void __launch_bounds__(kThreads, 4)
    rope_3d_vec8_kernel(__nv_bfloat16* __restrict__ qkv, const long long* __restrict__ token_ids,
                        int batch, int num_tokens, int num_heads, int head_dim, int grid_h,
                        int grid_w) {
  rope_3d_block<8>(qkv, token_ids, batch, num_tokens, num_heads, head_dim, grid_h, grid_w);
}

extern "C" __global__ void __launch_bounds__(kThreads, 4)
    rope_3d_vec2_kernel(__nv_bfloat16* __restrict__ qkv, const long long* __restrict__ token_ids,
                        int batch, int num_tokens, int num_heads, int head_dim, int grid_h,
                        int grid_w) {
  rope_3d_block<2>(qkv, token_ids, batch, num_tokens, num_heads, head_dim, grid_h, grid_w);
}
