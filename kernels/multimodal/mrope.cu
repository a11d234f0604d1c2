// Reference for multimodal/mrope: vLLM's MRotaryEmbedding (Qwen2-VL / Qwen2.5-VL multimodal
// rotary embedding, NeoX style) on bf16 query and key, in place.
//
// Device code only, compiled by NVRTC for sm_90a and launched as the directives below say (see
// kernels/llm/rms_norm.cu for the conventions). Every token has three positions, temporal,
// height and width: positions[0, t], positions[1, t], positions[2, t]. The rotation frequencies
// k < head_size / 2 are split into three consecutive sections of mrope_section_t,
// mrope_section_h and mrope_section_w frequencies; frequency k takes its angle from the
// position of its section, p = positions[section(k), t]:
//
//   c = cos_sin_cache[p, k],   s = cos_sin_cache[p, head_size / 2 + k]
//   x' = x * c - y * s,   y' = y * c + x * s     (fp32 from bf16 values, one rounding to bf16)
//
// with x = head[k] and y = head[head_size / 2 + k] (NeoX pairs), for every query and key head.
//
// Launch plan. As kernels/llm/rotary_embedding.cu: a "chunk" is 8 rotation pairs of one head
// (two 16-byte vectors of the head, one 16-byte vector each of cosines and sines), one chunk
// per thread. A chunk must lie inside one section, so that one position serves its 8 pairs:
// true when the section boundaries (mrope_section_t and mrope_section_t + mrope_section_h) are
// multiples of 8, as Qwen2-VL's and Qwen2.5-VL's [16, 24, 24] are. Other splits, and heads
// whose size is not a multiple of 16, take the pair-per-thread kernel.
//
// clang-format off
// @launch if (head_size % 16 == 0 && mrope_section_t % 8 == 0 && mrope_section_h % 8 == 0)
//     mrope_kernel<<<cdiv(num_tokens * (num_heads + num_kv_heads) * (head_size / 16), 128), 128>>>(
//         positions, query, key, head_size, cos_sin_cache, mrope_section_t, mrope_section_h,
//         num_tokens, num_heads, num_kv_heads)
// @launch if (head_size % 16 != 0 || mrope_section_t % 8 != 0 || mrope_section_h % 8 != 0)
//     mrope_pairs_kernel<<<cdiv(num_tokens * (num_heads + num_kv_heads) * (head_size / 2), 256), 256>>>(
//         positions, query, key, head_size, cos_sin_cache, mrope_section_t, mrope_section_h,
//         num_tokens, num_heads, num_kv_heads)
// clang-format on
//
// Design notes (why, for whoever optimises this next):
// - Memory bound, like the 1-D rotary embedding: 3 FLOPs per element against 4 bytes moved.
//   Each thread issues four independent 16-byte loads (two of the head, the cos and sin
//   vectors) and one 8-byte position load before any arithmetic, then two 16-byte stores.
// - What M-RoPE adds is a choice of row per chunk: the chunk's section picks which of the
//   token's three positions indexes the cache. The section is a function of the chunk's place
//   in the head only, so the threads of a warp that share a token read the same three positions
//   and the same few cache rows; repeats across heads hit L1/L2.
// - vLLM's CUDA path gathers cos and sin for all three positions into [3, num_tokens,
//   head_size / 2] tensors in PyTorch before its Triton kernel and masks two of the three rows
//   away per frequency; here the section picks the row and nothing is gathered ahead.
// - One chunk per thread over a flat grid rather than one block per token, for the reasons in
//   kernels/llm/rotary_embedding.cu: a single decode token still spreads over several SMs.
// - Chunk indices are 32-bit: every tensor is at most 16 GiB, so query and key together hold
//   at most 2^34 elements, 2^30 chunks. Element and position offsets are formed in 64 bits. The
//   pair kernel, a fallback, indexes in 64 bits throughout (pairs can reach 2^33).

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

// The position frequency k of `token` takes: row 0 (temporal) for k < section_t, row 1 (height)
// for the next section_h frequencies, row 2 (width) for the rest.
__device__ __forceinline__ long long section_position(const long long* positions,
                                                      unsigned int token, unsigned int k,
                                                      int section_t, int section_h,
                                                      int num_tokens) {
  const unsigned int t_end = static_cast<unsigned int>(section_t);
  const unsigned int h_end = t_end + static_cast<unsigned int>(section_h);
  const unsigned int row = k < t_end ? 0u : (k < h_end ? 1u : 2u);
  return positions[static_cast<size_t>(row) * static_cast<unsigned int>(num_tokens) + token];
}

}  // namespace

// positions: [3, num_tokens] int64; query: [num_tokens, num_heads, head_size]; key: [num_tokens,
// num_kv_heads, head_size]; cos_sin_cache: [max_position, head_size]. head_size % 16 == 0, so
// every head, half-head and cache row is 16-byte aligned (buffers are 256-byte aligned), and the
// section boundaries are multiples of 8, so a chunk's 8 pairs share one position.
extern "C" __global__ void __launch_bounds__(128)
    mrope_kernel(const long long* __restrict__ positions, __nv_bfloat16* query, __nv_bfloat16* key,
                 int head_size, const __nv_bfloat16* __restrict__ cos_sin_cache,
                 int mrope_section_t, int mrope_section_h, int num_tokens, int num_heads,
                 int num_kv_heads) {
  const unsigned int chunks_per_head = static_cast<unsigned int>(head_size) / 16;
  const unsigned int chunks_per_token =
      static_cast<unsigned int>(num_heads + num_kv_heads) * chunks_per_head;
  const unsigned int chunk = blockIdx.x * blockDim.x + threadIdx.x;
  if (chunk >= static_cast<unsigned int>(num_tokens) * chunks_per_token) return;
  const unsigned int token = chunk / chunks_per_token;
  const unsigned int within = chunk - token * chunks_per_token;
  const unsigned int head = within / chunks_per_head;
  const unsigned int first_pair = (within - head * chunks_per_head) * kPairsPerChunk;

  __nv_bfloat16* base = head_base(query, key, token, head, head_size, num_heads, num_kv_heads);
  const int half = head_size / 2;
  const long long position =
      section_position(positions, token, first_pair, mrope_section_t, mrope_section_h, num_tokens);
  const __nv_bfloat16* row = cos_sin_cache + position * head_size;
  const uint4 cos_vector = *reinterpret_cast<const uint4*>(row + first_pair);
  const uint4 sin_vector = *reinterpret_cast<const uint4*>(row + half + first_pair);
  // x: the chunk's 8 elements of the first half; y: the same 8 of the second half.
  uint4* first = reinterpret_cast<uint4*>(base + first_pair);
  uint4* second = reinterpret_cast<uint4*>(base + half + first_pair);
  const uint4 first_vector = *first;
  const uint4 second_vector = *second;

  const Floats8 c = to_floats(cos_vector);
  const Floats8 s = to_floats(sin_vector);
  const Floats8 a = to_floats(first_vector);
  const Floats8 b = to_floats(second_vector);
  Floats8 a_out;
  Floats8 b_out;
#pragma unroll
  for (int k = 0; k < kPairsPerChunk; ++k) {
    a_out.v[k] = a.v[k] * c.v[k] - b.v[k] * s.v[k];
    b_out.v[k] = b.v[k] * c.v[k] + a.v[k] * s.v[k];
  }
  *first = to_bf16(a_out);
  *second = to_bf16(b_out);
}

// Any even head_size and any section split: one rotation pair per thread, 2-byte accesses.
// Same arguments.
extern "C" __global__ void __launch_bounds__(256)
    mrope_pairs_kernel(const long long* __restrict__ positions, __nv_bfloat16* query,
                       __nv_bfloat16* key, int head_size,
                       const __nv_bfloat16* __restrict__ cos_sin_cache, int mrope_section_t,
                       int mrope_section_h, int num_tokens, int num_heads, int num_kv_heads) {
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
  const long long position =
      section_position(positions, token, k, mrope_section_t, mrope_section_h, num_tokens);
  const __nv_bfloat16* row = cos_sin_cache + position * head_size;
  const float c = __bfloat162float(row[k]);
  const float s = __bfloat162float(row[half + k]);
  const float x = __bfloat162float(base[k]);
  const float y = __bfloat162float(base[half + k]);
  base[k] = __float2bfloat16_rn(x * c - y * s);
  base[half + k] = __float2bfloat16_rn(y * c + x * s);
}
