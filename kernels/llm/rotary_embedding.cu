// Reference for llm/rotary_embedding: vLLM's rotary_embedding on bf16 query and key, in place.
//
// Device code only, compiled by NVRTC for sm_90a and launched as the directives below say (see
// kernels/llm/rms_norm.cu for the conventions). For every token t at position p = positions[t]
// and every head of query and key, each pair (x, y) of the head is rotated by the angle of its
// frequency k, with c = cos_sin_cache[p, k] and s = cos_sin_cache[p, head_size / 2 + k]:
//
//   x' = x * c - y * s,   y' = y * c + x * s     (fp32 from bf16 values, one rounding to bf16)
//
// NeoX style (is_neox = 1) pairs element k with element head_size / 2 + k; GPT-J style
// (is_neox = 0) pairs elements 2k and 2k + 1. The whole head is rotated (rot_dim = head_size).
//
// Launch plan. A "chunk" is 8 rotation pairs of one head: 16 bf16 values of the head (two
// 16-byte vectors) and 8 cosines and 8 sines (one 16-byte vector each). head_size / 16 chunks
// per head, one chunk per thread. Heads whose size is not a multiple of 16 (halves that are not
// whole vectors, or heads that are not 16-byte aligned) take the pair-per-thread kernel.
//
// clang-format off
// @launch if (head_size % 16 == 0) rotary_embedding_kernel<<<cdiv(num_tokens * (num_heads + num_kv_heads) * (head_size / 16), 128), 128>>>(positions, query, key, head_size, cos_sin_cache, is_neox, num_tokens, num_heads, num_kv_heads)
// @launch if (head_size % 16 != 0) rotary_embedding_pairs_kernel<<<cdiv(num_tokens * (num_heads + num_kv_heads) * (head_size / 2), 256), 256>>>(positions, query, key, head_size, cos_sin_cache, is_neox, num_tokens, num_heads, num_kv_heads)
// clang-format on
//
// Design notes (why, for whoever optimises this next):
// - Memory bound: 3 FLOPs per element against 4 bytes moved (read and write). What matters is
//   one read and one write of every query and key element with enough loads in flight: each
//   thread issues four independent 16-byte loads (two of the head, the cos and sin vectors)
//   before any arithmetic, and two 16-byte stores.
// - The cos/sin row of a token (head_size * 2 bytes) is read by every head of that token; the
//   repeats hit L1/L2, so DRAM sees each row about once. vLLM's kernel loads each cos/sin value
//   as a scalar per pair; here they come 8 at a time.
// - One chunk per thread over a flat grid, rather than one block per token: a Llama-3-8B token
//   is 40 heads x 8 chunks = 320 chunks, which a 256-thread block per token would cover
//   unevenly, and a single decode token would sit on one SM. 128-thread blocks spread a 32-token
//   decode (10240 chunks) over 80 of the H200's 132 SMs; an 8192-token prefill is about ten
//   waves of full SMs.
// - Chunk indices are 32-bit: every tensor is at most 16 GiB, so query and key together hold
//   at most 2^34 elements, 2^30 chunks. Element offsets are formed in 64 bits. The pair kernel,
//   a fallback, indexes in 64 bits throughout (pairs can reach 2^33).
// - is_neox is a scalar, so it cannot pick a launch; it is a uniform branch inside the kernel.

#include <cuda_bf16.h>

namespace {

// Rotation pairs per chunk, and bf16 values per 16-byte vector.
constexpr int kPairsPerChunk = 8;
constexpr int kVectorElems = 8;

// The 8 bf16 values of a 16-byte vector, in fp32.
struct Floats8 {
  float v[kVectorElems];
};

__device__ __forceinline__ Floats8 to_floats(const uint4& vector) {
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&vector);
  Floats8 out;
#pragma unroll
  for (int i = 0; i < kVectorElems / 2; ++i) {
    const float2 f = __bfloat1622float2(pairs[i]);
    out.v[2 * i] = f.x;
    out.v[2 * i + 1] = f.y;
  }
  return out;
}

__device__ __forceinline__ uint4 to_bf16(const Floats8& values) {
  uint4 vector;
  __nv_bfloat162* pairs = reinterpret_cast<__nv_bfloat162*>(&vector);
#pragma unroll
  for (int i = 0; i < kVectorElems / 2; ++i) {
    pairs[i] = __floats2bfloat162_rn(values.v[2 * i], values.v[2 * i + 1]);
  }
  return vector;
}

// The head that chunk or pair `index` of a token falls in: query heads first, then key heads.
__device__ __forceinline__ __nv_bfloat16* head_base(__nv_bfloat16* query, __nv_bfloat16* key,
                                                    unsigned int token, unsigned int head,
                                                    int head_size, int num_heads,
                                                    int num_kv_heads) {
  const unsigned int q_heads = static_cast<unsigned int>(num_heads);
  if (head < q_heads) {
    return query + (static_cast<size_t>(token) * q_heads + head) * static_cast<size_t>(head_size);
  }
  return key +
         (static_cast<size_t>(token) * static_cast<unsigned int>(num_kv_heads) + head - q_heads) *
             static_cast<size_t>(head_size);
}

}  // namespace

// positions: [num_tokens] int64; query: [num_tokens, num_heads, head_size]; key: [num_tokens,
// num_kv_heads, head_size]; cos_sin_cache: [max_position, head_size]. head_size % 16 == 0, so
// every head, every half-head and every cache row is 16-byte aligned (buffers are 256-byte
// aligned).
extern "C" __global__ void __launch_bounds__(128)
    rotary_embedding_kernel(const long long* __restrict__ positions, __nv_bfloat16* query,
                            __nv_bfloat16* key, int head_size,
                            const __nv_bfloat16* __restrict__ cos_sin_cache, int is_neox,
                            int num_tokens, int num_heads, int num_kv_heads) {
  const unsigned int chunks_per_head = static_cast<unsigned int>(head_size) / 16;
  const unsigned int chunks_per_token =
      static_cast<unsigned int>(num_heads + num_kv_heads) * chunks_per_head;
  const unsigned int chunk = blockIdx.x * blockDim.x + threadIdx.x;
  if (chunk >= static_cast<unsigned int>(num_tokens) * chunks_per_token) return;
  const unsigned int token = chunk / chunks_per_token;
  const unsigned int within = chunk - token * chunks_per_token;
  const unsigned int head = within / chunks_per_head;
  const unsigned int part = within - head * chunks_per_head;  // pairs [8 part, 8 part + 8)

  __nv_bfloat16* base = head_base(query, key, token, head, head_size, num_heads, num_kv_heads);
  const int half = head_size / 2;
  const __nv_bfloat16* row = cos_sin_cache + positions[token] * head_size;
  const uint4 cos_vector = *reinterpret_cast<const uint4*>(row + part * kPairsPerChunk);
  const uint4 sin_vector = *reinterpret_cast<const uint4*>(row + half + part * kPairsPerChunk);

  // NeoX: x is the chunk's 8 elements of the first half, y the same 8 of the second half.
  // GPT-J: the chunk is 16 consecutive elements, (x, y) interleaved.
  uint4* first = reinterpret_cast<uint4*>(
      base + (is_neox ? part * kPairsPerChunk : part * 2 * kPairsPerChunk));
  uint4* second = reinterpret_cast<uint4*>(
      base + (is_neox ? half + part * kPairsPerChunk : part * 2 * kPairsPerChunk + kVectorElems));
  const uint4 first_vector = *first;
  const uint4 second_vector = *second;

  const Floats8 c = to_floats(cos_vector);
  const Floats8 s = to_floats(sin_vector);
  const Floats8 a = to_floats(first_vector);
  const Floats8 b = to_floats(second_vector);
  Floats8 a_out;
  Floats8 b_out;
  if (is_neox) {
#pragma unroll
    for (int k = 0; k < kPairsPerChunk; ++k) {
      a_out.v[k] = a.v[k] * c.v[k] - b.v[k] * s.v[k];
      b_out.v[k] = b.v[k] * c.v[k] + a.v[k] * s.v[k];
    }
  } else {
    // Pairs 0..3 lie in `a`, pairs 4..7 in `b`.
#pragma unroll
    for (int k = 0; k < kPairsPerChunk / 2; ++k) {
      const float x0 = a.v[2 * k], y0 = a.v[2 * k + 1];
      a_out.v[2 * k] = x0 * c.v[k] - y0 * s.v[k];
      a_out.v[2 * k + 1] = y0 * c.v[k] + x0 * s.v[k];
      const int k1 = k + kPairsPerChunk / 2;
      const float x1 = b.v[2 * k], y1 = b.v[2 * k + 1];
      b_out.v[2 * k] = x1 * c.v[k1] - y1 * s.v[k1];
      b_out.v[2 * k + 1] = y1 * c.v[k1] + x1 * s.v[k1];
    }
  }
  *first = to_bf16(a_out);
  *second = to_bf16(b_out);
}

// Any even head_size: one rotation pair per thread, 2-byte accesses. Same arguments.
extern "C" __global__ void __launch_bounds__(256)
    rotary_embedding_pairs_kernel(const long long* __restrict__ positions, __nv_bfloat16* query,
                                  __nv_bfloat16* key, int head_size,
                                  const __nv_bfloat16* __restrict__ cos_sin_cache, int is_neox,
                                  int num_tokens, int num_heads, int num_kv_heads) {
  const unsigned int half = static_cast<unsigned int>(head_size) / 2;
  const unsigned int pairs_per_token = static_cast<unsigned int>(num_heads + num_kv_heads) * half;
  const unsigned long long pair =
      static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (pair >= static_cast<unsigned long long>(num_tokens) * pairs_per_token) return;
  const unsigned int token = static_cast<unsigned int>(pair / pairs_per_token);
  const unsigned int within =
      static_cast<unsigned int>(pair - static_cast<unsigned long long>(token) * pairs_per_token);
  const unsigned int head = within / half;
  const unsigned int k = within - head * half;

  __nv_bfloat16* base = head_base(query, key, token, head, head_size, num_heads, num_kv_heads);
  const __nv_bfloat16* row = cos_sin_cache + positions[token] * head_size;
  const float c = __bfloat162float(row[k]);
  const float s = __bfloat162float(row[half + k]);
  const unsigned int xi = is_neox ? k : 2 * k;
  const unsigned int yi = is_neox ? half + k : 2 * k + 1;
  const float x = __bfloat162float(base[xi]);
  const float y = __bfloat162float(base[yi]);
  base[xi] = __float2bfloat16_rn(x * c - y * s);
  base[yi] = __float2bfloat16_rn(y * c + x * s);
}
