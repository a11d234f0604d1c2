// Reference for ssm/chunk_gated_delta_rule: the gated DeltaNet prefill (FLA's
// chunk_gated_delta_rule as vLLM's Qwen3-Next layer calls it: cu_seqlens, q/k L2-normalised in
// the kernel, initial and final states), chunks of 64 tokens, head sizes 128.
//
// @workspace ws_w float[(cdiv(num_tokens, 64) + num_seqs) * num_v_heads * 8192]
// @workspace ws_u float[(cdiv(num_tokens, 64) + num_seqs) * num_v_heads * 8192]
// @workspace ws_a float[(cdiv(num_tokens, 64) + num_seqs) * num_v_heads * 4096]
// @workspace ws_rows float[(cdiv(num_tokens, 64) + num_seqs) * num_v_heads * 192]
// @launch gdr_chunk_prepare<<<dim3(cdiv(num_tokens, 64) + num_seqs, num_v_heads), 256, 108544>>>(
//     q, k, v, g, beta, cu_seqlens, ws_w, ws_u, ws_a, ws_rows, scale, num_seqs, num_k_heads,
//     num_v_heads)
// @launch gdr_chunk_scan<<<dim3(4, num_v_heads, num_seqs), 128, 166656>>>(q, k, initial_state,
//     cu_seqlens, ws_w, ws_u, ws_a, ws_rows, o, final_state, num_seqs, num_k_heads, num_v_heads)
//
// The chunked form (Yang, Kautz and Hatamizadeh, "Gated Delta Networks", 2024; FLA). In a chunk
// of L <= 64 tokens with normalised keys k_i, scaled normalised queries q_i, betas b_i and
// cumulative gates c_i = g_1 + ... + g_i (from the chunk's start), the state S entering the chunk
// and the corrections u_i of the recurrence satisfy (I + M) u = diag(b) V - diag(b e^c) K S with
// M_ij = b_i (k_i . k_j) e^(c_i - c_j) for j < i. With T = (I + M)^-1:
//   W = T diag(b e^c) K,  U = T diag(b) V,  u = U - W S,
//   o_i = e^(c_i) q_i S + sum_(j <= i) (q_i . k_j) e^(c_i - c_j) u_j,
//   S' = e^(c_L) S + sum_j e^(c_L - c_j) k_j u_j^T.
// Only differences of cumulative gates inside one chunk are exponentiated (never a sum over the
// whole sequence), and the upper triangle is masked before its exponential is taken.
//
// Kernels:
// - gdr_chunk_prepare, one block per (chunk, value head), all chunks in parallel: K K^T and
//   Q K^T of the raw bf16 rows on bf16 tensor cores (mma.sync m16n8k16: exact products, fp32
//   sums; the norms are applied afterwards as row and column scales), M and the causal
//   intra-chunk matrix A, T by forward substitution in fp32 (one thread per column: no barrier
//   inside the solve), then W and U on bf16 tensor cores with T's scaled columns split into two
//   bf16 parts (hi + lo, 16 bits of mantissa) against the exact raw k and v. Writes W, U, A and
//   the row factors e^(c_i) |q_i|^-1 scale, e^(c_L - c_i) |k_i|^-1 and e^(c_L).
// - gdr_chunk_scan, one block per (sequence, value head, 32 value columns), walking the
//   sequence's chunks in order with its fp32 state slice (128 x 32) in shared memory: u = U - W S
//   and Q S, then A u, o, and S' = e^(c_L) S + K^T (f u), on TF32 tensor cores (mma.sync
//   m16n8k8; operands rounded to 10 mantissa bits per chunk, the state itself kept fp32 between
//   chunks). The next chunk's W, A and U slices are copied with cp.async while the current
//   chunk's state update runs.
// Chunks are numbered across the batch, sequence after sequence (cdiv(length, 64) each); the
// grid of the first kernel covers the bound cdiv(num_tokens, 64) + num_seqs and its extra
// blocks exit.

#include <cuda_bf16.h>

namespace {

constexpr int kChunk = 64;
constexpr int kDim = 128;         // head_k_dim = head_v_dim
constexpr int kLdB = kDim + 8;    // bf16 rows of q, k, v in shared memory
constexpr int kLdG = kChunk + 8;  // fp32 64 x 64 matrices (and the bf16 parts aliasing them)
constexpr int kLdW = kDim + 4;    // fp32 64 x 128 matrices of the scan
constexpr int kTileV = 32;        // value columns a scan block owns
constexpr int kLdS = kTileV + 4;  // fp32 rows of 32 columns
constexpr int kRowsStride = 192;  // row factors a (chunk, head): fq[64], fk[64], e^(c_L)

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Tensor-core tiles through mma.sync (PTX ISA, "Matrix fragments for mma.m16n8k16" and
// "mma.m16n8k8"): lane = 4 g + t. A 16 x 16 fp32 tile is two 16 x 8 accumulators; in half h a
// lane holds rows g and g + 8 at columns 8 h + 2 t and 8 h + 2 t + 1.
struct Tile {
  float v[2][4];

  __device__ void zero() {
#pragma unroll
    for (int h = 0; h < 2; ++h) v[h][0] = v[h][1] = v[h][2] = v[h][3] = 0.f;
  }
  __device__ void scale(float f) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int e = 0; e < 4; ++e) v[h][e] *= f;
    }
  }
  // Row-major fp32 tile at p with leading dimension ld.
  __device__ void load(const float* p, int ld) {
    const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      v[h][0] = p[g * ld + 8 * h + 2 * t];
      v[h][1] = p[g * ld + 8 * h + 2 * t + 1];
      v[h][2] = p[(g + 8) * ld + 8 * h + 2 * t];
      v[h][3] = p[(g + 8) * ld + 8 * h + 2 * t + 1];
    }
  }
  __device__ void store(float* p, int ld) const {
    const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      p[g * ld + 8 * h + 2 * t] = v[h][0];
      p[g * ld + 8 * h + 2 * t + 1] = v[h][1];
      p[(g + 8) * ld + 8 * h + 2 * t] = v[h][2];
      p[(g + 8) * ld + 8 * h + 2 * t + 1] = v[h][3];
    }
  }
};

__device__ __forceinline__ unsigned bf16_pair(const __nv_bfloat16* p) {
  return *reinterpret_cast<const unsigned*>(p);  // p[0] in the low half
}

__device__ __forceinline__ unsigned bf16_pack(__nv_bfloat16 lo, __nv_bfloat16 hi) {
  return static_cast<unsigned>(__bfloat16_as_ushort(lo)) |
         (static_cast<unsigned>(__bfloat16_as_ushort(hi)) << 16);
}

__device__ __forceinline__ unsigned to_tf32(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}

__device__ __forceinline__ void mma_m16n8k16_bf16(float (&d)[4], const unsigned (&a)[4],
                                                  unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void mma_m16n8k8_tf32(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                                 unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The bf16 A fragment of a row-major 16 x 16 block at a (leading dimension lda, even).
__device__ __forceinline__ void load_a_bf16(unsigned (&fa)[4], const __nv_bfloat16* a, int lda) {
  const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
  fa[0] = bf16_pair(a + g * lda + 2 * t);
  fa[1] = bf16_pair(a + (g + 8) * lda + 2 * t);
  fa[2] = bf16_pair(a + g * lda + 2 * t + 8);
  fa[3] = bf16_pair(a + (g + 8) * lda + 2 * t + 8);
}

// C += A B, A 16 x 16 row-major bf16, B 16 x 16 with B[k][n] = b[n * ldb + k] (B^T row-major).
__device__ __forceinline__ void mma_bf16_bt(Tile& c, const __nv_bfloat16* a, int lda,
                                            const __nv_bfloat16* b, int ldb) {
  const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
  unsigned fa[4];
  load_a_bf16(fa, a, lda);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const __nv_bfloat16* col = b + (8 * h + g) * ldb;
    mma_m16n8k16_bf16(c.v[h], fa, bf16_pair(col + 2 * t), bf16_pair(col + 2 * t + 8));
  }
}

// C += A B, A 16 x 16 row-major bf16, B 16 x 16 row-major bf16 (B[k][n] = b[k * ldb + n]).
__device__ __forceinline__ void mma_bf16_bn(Tile& c, const __nv_bfloat16* a, int lda,
                                            const __nv_bfloat16* b, int ldb) {
  const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
  unsigned fa[4];
  load_a_bf16(fa, a, lda);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int n = 8 * h + g;
    const unsigned b0 = bf16_pack(b[(2 * t) * ldb + n], b[(2 * t + 1) * ldb + n]);
    const unsigned b1 = bf16_pack(b[(2 * t + 8) * ldb + n], b[(2 * t + 9) * ldb + n]);
    mma_m16n8k16_bf16(c.v[h], fa, b0, b1);
  }
}

// C += (sign A) B on TF32, A 16 x 8 fp32 (row-major a[r * lda + k], or column-major
// a[k * lda + r] when a_col), B 8 x 16 row-major fp32 (b[k * ldb + n]).
__device__ __forceinline__ void mma_tf32(Tile& c, const float* a, int lda, bool a_col, float sign,
                                         const float* b, int ldb) {
  const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
  unsigned fa[4];
  if (a_col) {
    fa[0] = to_tf32(sign * a[t * lda + g]);
    fa[1] = to_tf32(sign * a[t * lda + g + 8]);
    fa[2] = to_tf32(sign * a[(t + 4) * lda + g]);
    fa[3] = to_tf32(sign * a[(t + 4) * lda + g + 8]);
  } else {
    fa[0] = to_tf32(sign * a[g * lda + t]);
    fa[1] = to_tf32(sign * a[(g + 8) * lda + t]);
    fa[2] = to_tf32(sign * a[g * lda + t + 4]);
    fa[3] = to_tf32(sign * a[(g + 8) * lda + t + 4]);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int n = 8 * h + g;
    mma_m16n8k8_tf32(c.v[h], fa, to_tf32(b[t * ldb + n]), to_tf32(b[(t + 4) * ldb + n]));
  }
}

// By one warp (every lane gets the answer): the sequence holding global chunk `target` (target
// >= 0) or sequence `want_seq` (target < 0), in *seq (-1 if none), and the chunks of the
// sequences before it, in *first.
__device__ void locate_chunks(const int* cu_seqlens, int num_seqs, int target, int want_seq,
                              int* seq, int* first) {
  const int lane = threadIdx.x & 31;
  int base = 0;
  int found_seq = -1, found_first = 0;
  for (int n0 = 0; n0 < num_seqs; n0 += 32) {
    const int n = n0 + lane;
    int count = 0;
    if (n < num_seqs) count = (cu_seqlens[n + 1] - cu_seqlens[n] + kChunk - 1) / kChunk;
    int inclusive = count;
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, inclusive, offset);
      if (lane >= offset) inclusive += y;
    }
    const int exclusive = base + inclusive - count;
    const bool hit =
        n < num_seqs &&
        (target >= 0 ? (target >= exclusive && target < exclusive + count) : n == want_seq);
    const unsigned hits = __ballot_sync(0xffffffffu, hit);
    if (hits != 0u) {
      const int src = __ffs(hits) - 1;
      found_seq = __shfl_sync(0xffffffffu, n, src);
      found_first = __shfl_sync(0xffffffffu, exclusive, src);
    }
    base += __shfl_sync(0xffffffffu, inclusive, 31);
  }
  *seq = found_seq;
  *first = found_first;
}

// 16-byte asynchronous copy global -> shared (sm_80+), and the wait for all of a thread's.
__device__ __forceinline__ void cp_async16(void* smem_dst, const void* gmem_src) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem_src) : "memory");
}

__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}

__device__ __forceinline__ void bf16x8_to_float(const uint4 raw, float* dst) {
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int p = 0; p < 4; ++p) {
    const float2 f = __bfloat1622float2(pairs[p]);
    dst[2 * p] = f.x;
    dst[2 * p + 1] = f.y;
  }
}

}  // namespace

// Shared memory (bytes): k, q, v rows (bf16, 3 x 17408), then K K^T / M / W's T parts (18432),
// Q K^T / A / U's T parts (18432), T (18432), row vectors (1024): 108544.
__global__ void __launch_bounds__(256)
    gdr_chunk_prepare(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                      const __nv_bfloat16* __restrict__ v, const float* __restrict__ g,
                      const __nv_bfloat16* __restrict__ beta, const int* __restrict__ cu_seqlens,
                      float* __restrict__ ws_w, float* __restrict__ ws_u, float* __restrict__ ws_a,
                      float* __restrict__ ws_rows, float scale, int num_seqs, int num_k_heads,
                      int num_v_heads) {
  extern __shared__ __align__(128) unsigned char smem[];
  __nv_bfloat16* kb = reinterpret_cast<__nv_bfloat16*>(smem);
  __nv_bfloat16* qb = kb + kChunk * kLdB;
  __nv_bfloat16* vb = qb + kChunk * kLdB;
  float* gk = reinterpret_cast<float*>(vb + kChunk * kLdB);  // K K^T, then M
  float* gq = gk + kChunk * kLdG;                            // Q K^T, then A
  float* tm = gq + kChunk * kLdG;                            // T
  float* gc = tm + kChunk * kLdG;                            // cumulative gates
  float* bt = gc + kChunk;                                   // beta
  float* rk = bt + kChunk;                                   // 1 / |k|
  float* rq = rk + kChunk;                                   // scale / |q|
  __nv_bfloat16* tw = reinterpret_cast<__nv_bfloat16*>(gk);  // W's T parts, once M is used
  __nv_bfloat16* tu = reinterpret_cast<__nv_bfloat16*>(gq);  // U's T parts, once A is out
  __shared__ int s_chunk[2];

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int chunk = blockIdx.x;
  const int hv = blockIdx.y;
  const int h = hv / (num_v_heads / num_k_heads);

  if (warp == 0) {
    int seq, first;
    locate_chunks(cu_seqlens, num_seqs, chunk, -1, &seq, &first);
    if (lane == 0) {
      if (seq < 0) {
        s_chunk[0] = -1;
        s_chunk[1] = 0;
      } else {
        const int start = cu_seqlens[seq] + (chunk - first) * kChunk;
        s_chunk[0] = start;
        s_chunk[1] = min(kChunk, cu_seqlens[seq + 1] - start);
      }
    }
  }
  __syncthreads();
  const int t0 = s_chunk[0];
  const int len = s_chunk[1];
  if (t0 < 0) return;

  // Raw rows, 16 bytes a thread a step; rows past the chunk are zero.
  for (int idx = tid; idx < kChunk * (kDim / 8); idx += blockDim.x) {
    const int r = idx >> 4;
    const int c8 = (idx & 15) * 8;
    uint4 kr = make_uint4(0u, 0u, 0u, 0u), qr = kr, vr = kr;
    if (r < len) {
      const size_t tok = static_cast<size_t>(t0 + r);
      kr = *reinterpret_cast<const uint4*>(k + (tok * num_k_heads + h) * kDim + c8);
      qr = *reinterpret_cast<const uint4*>(q + (tok * num_k_heads + h) * kDim + c8);
      vr = *reinterpret_cast<const uint4*>(v + (tok * num_v_heads + hv) * kDim + c8);
    }
    *reinterpret_cast<uint4*>(kb + r * kLdB + c8) = kr;
    *reinterpret_cast<uint4*>(qb + r * kLdB + c8) = qr;
    *reinterpret_cast<uint4*>(vb + r * kLdB + c8) = vr;
  }
  if (warp == 7) {
    // Cumulative gates: an inclusive scan over the two halves of the chunk (g = 0 past it, so
    // c stays at the last token's value).
    float g0 = 0.f, g1 = 0.f;
    if (lane < len) g0 = g[static_cast<size_t>(t0 + lane) * num_v_heads + hv];
    if (lane + 32 < len) g1 = g[static_cast<size_t>(t0 + lane + 32) * num_v_heads + hv];
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
      const float y0 = __shfl_up_sync(0xffffffffu, g0, offset);
      const float y1 = __shfl_up_sync(0xffffffffu, g1, offset);
      if (lane >= offset) {
        g0 += y0;
        g1 += y1;
      }
    }
    const float half = __shfl_sync(0xffffffffu, g0, 31);
    gc[lane] = g0;
    gc[lane + 32] = g1 + half;
  }
  __syncthreads();

  // Norms (FLA: x / sqrt(sum x^2 + 1e-6)) and betas; zero past the chunk.
  for (int rr = 0; rr < kChunk / 8; ++rr) {
    const int r = warp * (kChunk / 8) + rr;
    float sk = 0.f, sq = 0.f;
    for (int c = lane; c < kDim; c += 32) {
      const float a = __bfloat162float(kb[r * kLdB + c]);
      const float b = __bfloat162float(qb[r * kLdB + c]);
      sk = fmaf(a, a, sk);
      sq = fmaf(b, b, sq);
    }
    sk = warp_sum(sk);
    sq = warp_sum(sq);
    if (lane == 0) {
      const bool in = r < len;
      rk[r] = in ? 1.f / sqrtf(sk + 1e-6f) : 0.f;
      rq[r] = in ? scale / sqrtf(sq + 1e-6f) : 0.f;
      bt[r] = in ? __bfloat162float(beta[static_cast<size_t>(t0 + r) * num_v_heads + hv]) : 0.f;
    }
  }

  // K K^T and Q K^T of the raw rows: 16 tiles each, 4 a warp.
  for (int t = warp; t < 32; t += 8) {
    const __nv_bfloat16* a_src = t < 16 ? kb : qb;
    float* dst = t < 16 ? gk : gq;
    const int rt = (t & 15) >> 2;
    const int ct = t & 3;
    Tile acc;
    acc.zero();
#pragma unroll
    for (int kk = 0; kk < kDim; kk += 16) {
      mma_bf16_bt(acc, a_src + rt * 16 * kLdB + kk, kLdB, kb + ct * 16 * kLdB + kk, kLdB);
    }
    acc.store(dst + rt * 16 * kLdG + ct * 16, kLdG);
  }
  __syncthreads();

  // M (strictly lower) over K K^T, A (lower, with the diagonal) over Q K^T, in place. The upper
  // triangle is never exponentiated (e^(c_i - c_j) overflows there under strong decay).
  for (int idx = tid; idx < kChunk * kChunk; idx += blockDim.x) {
    const int i = idx >> 6;
    const int j = idx & 63;
    float m = 0.f, a = 0.f;
    if (j <= i) {
      const float d = expf(gc[i] - gc[j]);
      a = rq[i] * rk[j] * gq[i * kLdG + j] * d;
      if (j < i) m = bt[i] * rk[i] * rk[j] * gk[i * kLdG + j] * d;
    }
    gk[i * kLdG + j] = m;
    gq[i * kLdG + j] = a;
  }
  __syncthreads();

  const size_t cg = static_cast<size_t>(chunk) * num_v_heads + hv;
  {
    float* a_out = ws_a + cg * (kChunk * kChunk);
    for (int idx = tid; idx < kChunk * kChunk; idx += blockDim.x) {
      a_out[idx] = gq[(idx >> 6) * kLdG + (idx & 63)];
    }
    float* rows_out = ws_rows + cg * kRowsStride;
    const float c_last = gc[kChunk - 1];
    if (tid < kChunk) {
      rows_out[tid] = expf(gc[tid]) * rq[tid];
      rows_out[kChunk + tid] = expf(c_last - gc[tid]) * rk[tid];
    }
    if (tid == kChunk) rows_out[2 * kChunk] = expf(c_last);
  }

  // T = (I + M)^-1 by forward substitution, column c by thread c:
  // T[i][c] = delta_ic - sum_(j < i) M[i][j] T[j][c]. Every thread runs the same loop bounds, so
  // M[i][j] is a broadcast read.
  if (tid < kChunk) {
    const int c = tid;
    tm[c] = c == 0 ? 1.f : 0.f;
    for (int i = 1; i < kChunk; ++i) {
      const float* m_row = gk + i * kLdG;
      float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
      int j = 0;
      for (; j + 4 <= i; j += 4) {
        s0 = fmaf(m_row[j], tm[j * kLdG + c], s0);
        s1 = fmaf(m_row[j + 1], tm[(j + 1) * kLdG + c], s1);
        s2 = fmaf(m_row[j + 2], tm[(j + 2) * kLdG + c], s2);
        s3 = fmaf(m_row[j + 3], tm[(j + 3) * kLdG + c], s3);
      }
      for (; j < i; ++j) s0 = fmaf(m_row[j], tm[j * kLdG + c], s0);
      tm[i * kLdG + c] = i == c ? 1.f : (i < c ? 0.f : -((s0 + s1) + (s2 + s3)));
    }
  }
  __syncthreads();

  // T diag(b e^c / |k|) and T diag(b), each split into bf16 hi + lo parts (M and A are no longer
  // needed: the parts overwrite them).
  for (int idx = tid; idx < kChunk * kChunk; idx += blockDim.x) {
    const int i = idx >> 6;
    const int j = idx & 63;
    const float t = tm[i * kLdG + j];
    const float w = t * bt[j] * expf(gc[j]) * rk[j];
    const float u = t * bt[j];
    const __nv_bfloat16 w_hi = __float2bfloat16(w);
    const __nv_bfloat16 u_hi = __float2bfloat16(u);
    tw[i * kLdG + j] = w_hi;
    tw[kChunk * kLdG + i * kLdG + j] = __float2bfloat16(w - __bfloat162float(w_hi));
    tu[i * kLdG + j] = u_hi;
    tu[kChunk * kLdG + i * kLdG + j] = __float2bfloat16(u - __bfloat162float(u_hi));
  }
  __syncthreads();

  // W = T' K_raw and U = T'' V_raw: 32 tiles each, 8 a warp, two parts each.
  float* w_out = ws_w + cg * (kChunk * kDim);
  float* u_out = ws_u + cg * (kChunk * kDim);
  for (int t = warp; t < 64; t += 8) {
    const bool is_w = t < 32;
    const int rt = (t & 31) >> 3;
    const int ct = t & 7;
    const __nv_bfloat16* parts = is_w ? tw : tu;
    const __nv_bfloat16* src = is_w ? kb : vb;
    Tile acc;
    acc.zero();
#pragma unroll
    for (int p = 1; p >= 0; --p) {
#pragma unroll
      for (int kk = 0; kk < kChunk; kk += 16) {
        mma_bf16_bn(acc, parts + p * kChunk * kLdG + rt * 16 * kLdG + kk, kLdG,
                    src + kk * kLdB + ct * 16, kLdB);
      }
    }
    acc.store((is_w ? w_out : u_out) + rt * 16 * kDim + ct * 16, kDim);
  }
}

// Shared memory (floats): S 128 x 36, W, Q, K 64 x 132 each, A 64 x 72, u, U (then A u), Q S
// 64 x 36 each, row factors 192: 41664 floats = 166656 bytes.
__global__ void __launch_bounds__(128)
    gdr_chunk_scan(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                   const float* __restrict__ initial_state, const int* __restrict__ cu_seqlens,
                   const float* __restrict__ ws_w, const float* __restrict__ ws_u,
                   const float* __restrict__ ws_a, const float* __restrict__ ws_rows,
                   __nv_bfloat16* __restrict__ o, float* __restrict__ final_state, int num_seqs,
                   int num_k_heads, int num_v_heads) {
  extern __shared__ __align__(128) unsigned char smem[];
  float* s = reinterpret_cast<float*>(smem);  // state slice [128][kLdS]
  float* wc = s + kDim * kLdS;                // W [64][kLdW]
  float* qf = wc + kChunk * kLdW;             // raw q [64][kLdW]
  float* kf = qf + kChunk * kLdW;             // raw k [64][kLdW]
  float* ac = kf + kChunk * kLdW;             // A [64][kLdG]
  float* un = ac + kChunk * kLdG;             // u [64][kLdS]
  float* uc = un + kChunk * kLdS;             // U tile, then A u [64][kLdS]
  float* pq = uc + kChunk * kLdS;             // Q S [64][kLdS]
  float* rows = pq + kChunk * kLdS;           // fq[64], fk[64], e^(c_L)
  __shared__ int s_first;

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int v0 = blockIdx.x * kTileV;
  const int hv = blockIdx.y;
  const int n = blockIdx.z;
  const int h = hv / (num_v_heads / num_k_heads);
  const int bos = cu_seqlens[n];
  const int eos = cu_seqlens[n + 1];

  if (warp == 0) {
    int seq, first;
    locate_chunks(cu_seqlens, num_seqs, -1, n, &seq, &first);
    if (lane == 0) s_first = first;
  }
  const size_t state_base = (static_cast<size_t>(n) * num_v_heads + hv) * kDim * kDim + v0;
  for (int idx = tid; idx < kDim * (kTileV / 4); idx += blockDim.x) {
    const int r = idx >> 3;
    const int c4 = (idx & 7) * 4;
    *reinterpret_cast<float4*>(s + r * kLdS + c4) =
        *reinterpret_cast<const float4*>(initial_state + state_base + r * kDim + c4);
  }
  __syncthreads();
  const int first = s_first;
  const int num_chunks = (eos - bos + kChunk - 1) / kChunk;

  // W, A, the U tile and the row factors of chunk c, copied asynchronously (the next chunk's
  // copies overlap the state update of the current one).
  auto issue_chunk_copies = [&](int c) {
    const size_t cg = static_cast<size_t>(first + c) * num_v_heads + hv;
    const float* w_in = ws_w + cg * (kChunk * kDim);
    for (int idx = tid; idx < kChunk * (kDim / 4); idx += blockDim.x) {
      const int r = idx >> 5;
      const int c4 = (idx & 31) * 4;
      cp_async16(wc + r * kLdW + c4, w_in + r * kDim + c4);
    }
    const float* a_in = ws_a + cg * (kChunk * kChunk);
    for (int idx = tid; idx < kChunk * (kChunk / 4); idx += blockDim.x) {
      const int r = idx >> 4;
      const int c4 = (idx & 15) * 4;
      cp_async16(ac + r * kLdG + c4, a_in + r * kChunk + c4);
    }
    const float* u_in = ws_u + cg * (kChunk * kDim) + v0;
    for (int idx = tid; idx < kChunk * (kTileV / 4); idx += blockDim.x) {
      const int r = idx >> 3;
      const int c4 = (idx & 7) * 4;
      cp_async16(uc + r * kLdS + c4, u_in + r * kDim + c4);
    }
    // fq, fk and e^(c_L): the first 132 of the 192 floats.
    for (int idx = tid; idx < (2 * kChunk + 4) / 4; idx += blockDim.x) {
      cp_async16(rows + idx * 4, ws_rows + cg * kRowsStride + idx * 4);
    }
  };
  if (num_chunks > 0) issue_chunk_copies(0);

  for (int c = 0; c < num_chunks; ++c) {
    const int t0 = bos + c * kChunk;
    const int len = min(kChunk, eos - t0);
    for (int idx = tid; idx < kChunk * (kDim / 8); idx += blockDim.x) {
      const int r = idx >> 4;
      const int c8 = (idx & 15) * 8;
      uint4 kr = make_uint4(0u, 0u, 0u, 0u), qr = kr;
      if (r < len) {
        const size_t tok = static_cast<size_t>(t0 + r);
        kr = *reinterpret_cast<const uint4*>(k + (tok * num_k_heads + h) * kDim + c8);
        qr = *reinterpret_cast<const uint4*>(q + (tok * num_k_heads + h) * kDim + c8);
      }
      bf16x8_to_float(kr, kf + r * kLdW + c8);
      bf16x8_to_float(qr, qf + r * kLdW + c8);
    }
    cp_async_wait_all();
    __syncthreads();

    // u = U - W S and Q S: 8 tiles of 16 x 16 each, 4 a warp.
    for (int t = warp; t < 16; t += 4) {
      const bool is_u = t < 8;
      const int rt = (t & 7) >> 1;
      const int ct = t & 1;
      Tile acc;
      if (is_u) {
        acc.load(uc + rt * 16 * kLdS + ct * 16, kLdS);
      } else {
        acc.zero();
      }
      const float* a_src = is_u ? wc : qf;
      const float sign = is_u ? -1.f : 1.f;
#pragma unroll 4
      for (int kk = 0; kk < kDim; kk += 8) {
        mma_tf32(acc, a_src + rt * 16 * kLdW + kk, kLdW, false, sign, s + kk * kLdS + ct * 16,
                 kLdS);
      }
      acc.store((is_u ? un : pq) + rt * 16 * kLdS + ct * 16, kLdS);
    }
    __syncthreads();

    // A u (A is causal and zero past the chunk): 8 tiles, 2 a warp, into the U buffer.
    for (int t = warp; t < 8; t += 4) {
      const int rt = t >> 1;
      const int ct = t & 1;
      Tile acc;
      acc.zero();
#pragma unroll
      for (int kk = 0; kk < kChunk; kk += 8) {
        mma_tf32(acc, ac + rt * 16 * kLdG + kk, kLdG, false, 1.f, un + kk * kLdS + ct * 16, kLdS);
      }
      acc.store(uc + rt * 16 * kLdS + ct * 16, kLdS);
    }
    __syncthreads();

    // o = fq (Q S) + A u for the chunk's tokens; u scaled by fk for the state update.
    for (int idx = tid; idx < kChunk * kTileV; idx += blockDim.x) {
      const int i = idx >> 5;
      const int j = idx & 31;
      if (i < len) {
        o[(static_cast<size_t>(t0 + i) * num_v_heads + hv) * kDim + v0 + j] =
            __float2bfloat16(fmaf(rows[i], pq[i * kLdS + j], uc[i * kLdS + j]));
      }
      un[i * kLdS + j] *= rows[kChunk + i];
    }
    const float e_last = rows[2 * kChunk];
    __syncthreads();
    // W, A, U and the row factors are read for this chunk: start the next chunk's copies.
    if (c + 1 < num_chunks) issue_chunk_copies(c + 1);

    // S = e^(c_L) S + K^T (fk u): 16 tiles of the 128 x 32 slice, 4 a warp.
    for (int t = warp; t < 16; t += 4) {
      const int rt = t >> 1;
      const int ct = t & 1;
      Tile acc;
      acc.load(s + rt * 16 * kLdS + ct * 16, kLdS);
      acc.scale(e_last);
#pragma unroll
      for (int kk = 0; kk < kChunk; kk += 8) {
        mma_tf32(acc, kf + kk * kLdW + rt * 16, kLdW, true, 1.f, un + kk * kLdS + ct * 16, kLdS);
      }
      acc.store(s + rt * 16 * kLdS + ct * 16, kLdS);
    }
    __syncthreads();
  }

  for (int idx = tid; idx < kDim * (kTileV / 4); idx += blockDim.x) {
    const int r = idx >> 3;
    const int c4 = (idx & 7) * 4;
    *reinterpret_cast<float4*>(final_state + state_base + r * kDim + c4) =
        *reinterpret_cast<const float4*>(s + r * kLdS + c4);
  }
}
